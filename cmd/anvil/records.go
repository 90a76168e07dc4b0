package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/google/uuid"

	"github.com/anvil-metal/anvil/controller/client"
	"github.com/anvil-metal/anvil/controller/erasure"
	"github.com/anvil-metal/anvil/controller/erasure/erasurepdf"
	"github.com/anvil-metal/anvil/internal/cli"
	"github.com/anvil-metal/anvil/protocol"
)

const recordsUsage = `usage: anvil erase-records NODE [--format json|text|pdf]
       anvil erase-records verify FILE [--key PUBLIC-KEY]
       anvil erase-records public-key

The first form writes the node's signed sanitization records (one per
erased disk) to standard output: as JSON for verify, as text certificates,
or as a PDF with a page per record. verify checks such a JSON file offline;
public-key prints the key the controller signs with. NODE is a node's name
or UUID; a deleted node's records are found by its UUID.
`

const verifyUsage = `usage: anvil erase-records verify FILE [--key PUBLIC-KEY]

Checks the signature of every record in FILE (from "anvil erase-records
NODE") offline. With --key only that key is trusted; without, each record's
own key is checked and its fingerprint printed, to compare with
"anvil erase-records public-key".
`

const publicKeyUsage = `usage: anvil erase-records public-key

Prints the public key the controller signs sanitization records with, and
its fingerprint.
`

// eraseRecords is "anvil erase-records ...": export a node's signed
// sanitization records, verify an export offline, or print the key.
func eraseRecords(ctx context.Context, dial connect, args []string, out io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "verify":
			return verifyRecords(args[1:], out)
		case "public-key":
			return publicKey(ctx, dial, args[1:], out)
		}
	}
	fs := flag.NewFlagSet("erase-records", flag.ContinueOnError)
	format := fs.String("format", "json", "json (signed, for verify), text (a certificate per disk) or pdf (the same, a page per disk)")
	pos, err := cli.Parse(fs, recordsUsage, args, "NODE")
	if err != nil {
		return err
	}
	node := pos[0]
	if *format != "json" && *format != "text" && *format != "pdf" {
		return cli.Errorf(cli.Usage(fs, recordsUsage), "--format %q: want json, text or pdf", *format)
	}
	c, err := dial()
	if err != nil {
		return err
	}
	// The file names the node by UUID, which every record holds (a name
	// can change or be reused), and the records are listed by it too.
	nodeUUID, err := resolveNode(ctx, c, node)
	if err != nil {
		return err
	}
	f := erasure.File{Format: erasure.FileFormat, Node: nodeUUID, Records: []json.RawMessage{}}
	marker := ""
	for {
		var body struct {
			Records []json.RawMessage `json:"erase_records"`
			Next    string            `json:"next"`
		}
		q := url.Values{"limit": {"100"}}
		if marker != "" {
			q.Set("marker", marker)
		}
		if err := c.Do(ctx, "GET", "/v1/nodes/"+url.PathEscape(nodeUUID)+"/erase-records?"+q.Encode(), nil, &body); err != nil {
			return err
		}
		f.Records = append(f.Records, body.Records...)
		if body.Next == "" || len(body.Records) == 0 {
			break
		}
		var last struct {
			Record struct {
				UUID string `json:"uuid"`
			} `json:"record"`
		}
		if err := json.Unmarshal(body.Records[len(body.Records)-1], &last); err != nil {
			return fmt.Errorf("erase record: %w", err)
		}
		marker = last.Record.UUID
	}
	if *format == "text" || *format == "pdf" {
		vs := make([]erasure.Verified, len(f.Records))
		for i, d := range f.Records {
			vs[i] = erasure.Verify(d)
		}
		if *format == "pdf" {
			return erasurepdf.Write(out, "node "+node, vs)
		}
		return erasure.WriteText(out, "node "+node, vs)
	}
	// One record per line: the file stays readable and diffable.
	var b strings.Builder
	fmt.Fprintf(&b, "{\"format\":%q,\"node\":%q,\"records\":[", f.Format, f.Node)
	for i, d := range f.Records {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n")
		b.Write(d)
	}
	b.WriteString("\n]}\n")
	_, err = io.WriteString(out, b.String())
	return err
}

func publicKey(ctx context.Context, dial connect, args []string, out io.Writer) error {
	if _, err := cli.Parse(flag.NewFlagSet("public-key", flag.ContinueOnError), publicKeyUsage, args); err != nil {
		return err
	}
	c, err := dial()
	if err != nil {
		return err
	}
	var body struct {
		PublicKey   string `json:"public_key"`
		Fingerprint string `json:"fingerprint"`
	}
	if err := c.Do(ctx, "GET", "/v1/erase-records/public-key", nil, &body); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\nfingerprint %s\n", body.PublicKey, body.Fingerprint)
	return err
}

// resolveNode is the UUID of the node named node (a name or UUID). A
// deleted node's records are still listed by its UUID, so a UUID the API
// no longer knows as a node is taken as it is.
func resolveNode(ctx context.Context, c *client.Client, node string) (string, error) {
	n, err := c.GetNode(ctx, node)
	if err == nil {
		return n.UUID, nil
	}
	var apiErr *client.Error
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound {
		if u, perr := uuid.Parse(node); perr == nil {
			return u.String(), nil
		}
	}
	return "", fmt.Errorf("node %s: %w", node, err)
}

// verifyRecords checks a file of signed records offline. With --key, only
// that key is trusted; without, each record's own key is checked and its
// fingerprint printed, to compare with "anvil erase-records public-key".
func verifyRecords(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	keyText := fs.String("key", "", "trust only this public key (base64, as 'anvil erase-records public-key' prints it)")
	pos, err := cli.Parse(fs, verifyUsage, args, "FILE")
	if err != nil {
		return err
	}
	file := pos[0]
	var trusted []ed25519.PublicKey
	if *keyText != "" {
		k, err := erasure.DecodePublicKey(strings.TrimSpace(*keyText))
		if err != nil {
			return fmt.Errorf("--key: %w", err)
		}
		trusted = append(trusted, k)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	vs, err := erasure.VerifyFile(data, trusted...)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	bad := 0
	for i, v := range vs {
		r := v.Record
		what := fmt.Sprintf("%d. %s %s serial %s (%s, %s)", i+1, r.Media.Device, r.Media.Model, r.Media.Serial, r.Sanitization.Category, r.Sanitization.Method)
		if v.Err != nil {
			bad++
			fmt.Fprintf(out, "FAILED  %s: %v\n", what, v.Err)
			continue
		}
		fmt.Fprintf(out, "OK      %s, signed by %s\n", what, erasure.Fingerprint(v.Key))
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d records failed verification", bad, len(vs))
	}
	if len(trusted) == 0 {
		fmt.Fprintln(out, "no --key given: compare the fingerprints above with the controller's ('anvil erase-records public-key')")
	}
	return nil
}

// retirementLines says, for a retired node, which disks have a signed
// sanitization record made while the node was retired (cleaned for
// disposal), and which inventoried disks have none.
func retirementLines(node map[string]any, docs []json.RawMessage, disks []protocol.Disk) []string {
	if node["retired"] != true {
		return nil
	}
	var out []string
	covered := map[string]bool{}
	for _, d := range docs {
		v := erasure.Verify(d)
		r := v.Record
		if !r.Node.Retired {
			continue
		}
		state := "record " + r.UUID
		if r.Sanitization.Scope != "" {
			state = "covers only " + r.Sanitization.Scope + "; " + state
		}
		if v.Err != nil {
			state += " (signature INVALID: " + v.Err.Error() + ")"
		}
		out = append(out, fmt.Sprintf("RETIREMENT: %s serial %s sanitized after retirement: %s by %s, finished %s; %s",
			r.Media.Device, orUnknown(r.Media.Serial), r.Sanitization.Category, r.Sanitization.Method, r.FinishedAt, state))
		if r.Media.Serial != "" {
			covered[r.Media.Serial] = true
		}
		covered[r.Media.Device] = true
	}
	for _, d := range disks {
		if d.Optical || d.VirtualMedia || covered[d.Name] || (d.Serial != "" && covered[d.Serial]) {
			continue
		}
		out = append(out, fmt.Sprintf("RETIREMENT: %s serial %s has NO sanitization record since retirement", d.Name, orUnknown(d.Serial)))
	}
	if len(out) == 0 {
		out = append(out, "RETIREMENT: no disk has a sanitization record since retirement")
	}
	return out
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
