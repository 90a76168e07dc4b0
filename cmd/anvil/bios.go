package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/anvil-metal/anvil/controller/client"
	"github.com/anvil-metal/anvil/internal/cli"
)

const biosUsage = `usage: anvil node bios NODE [--json]

The node's BIOS settings as its BMC last reported them (cached when the node
became manageable, after cleaning and after each BIOS step): value, the
pending value the next boot applies, and what the attribute registry allows.
`

const firmwareUsage = `usage: anvil node firmware NODE [--json]

The node's firmware versions per component (bios, bmc, NICs, disks): the
version first seen, the current one and the last one flashed. Needs the
controller's API 1.86.
`

// biosCmd is "anvil node bios NODE".
func biosCmd(ctx context.Context, dial connect, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("bios", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the settings as JSON, pending values included")
	pos, err := cli.Parse(fs, biosUsage, args, "NODE")
	if err != nil {
		return err
	}
	c, err := dial()
	if err != nil {
		return err
	}
	b, err := c.BIOS(ctx, pos[0])
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(out, b.Settings)
	}
	if len(b.Settings) == 0 {
		_, err := fmt.Fprintln(out, b.Reason)
		return err
	}
	pending := 0
	for _, s := range b.Settings {
		if s.PendingValue != nil {
			pending++
		}
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	head := "NAME\tVALUE\t"
	if pending > 0 {
		head += "PENDING\t"
	}
	fmt.Fprintln(tw, head+"TYPE\tALLOWED\tFLAGS")
	for _, s := range b.Settings {
		line := s.Name + "\t" + orDash(s.Value) + "\t"
		if pending > 0 {
			line += deref(s.PendingValue, "-") + "\t"
		}
		fmt.Fprintln(tw, line+orDash(s.AttributeType)+"\t"+orDash(allowed(&s))+"\t"+orDash(biosFlags(&s)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if pending > 0 {
		_, err = fmt.Fprintf(out, "%d of %d settings pending: the BMC applies them at the node's next boot\n", pending, len(b.Settings))
	}
	return err
}

// allowed is what a setting's registry allows, short: an enumeration's
// values, an integer's bounds, a string's lengths.
func allowed(s *client.BIOSSetting) string {
	switch {
	case len(s.AllowableValues) > 0:
		return trim(strings.Join(s.AllowableValues, ","), 40)
	case s.LowerBound != nil || s.UpperBound != nil:
		return bound(s.LowerBound) + ".." + bound(s.UpperBound)
	case s.MinLength != nil || s.MaxLength != nil:
		return "length " + bound(s.MinLength) + ".." + bound(s.MaxLength)
	}
	return ""
}

func bound(p *int) string {
	if p == nil {
		return ""
	}
	return strconv.Itoa(*p)
}

func biosFlags(s *client.BIOSSetting) string {
	var f []string
	for _, b := range []struct {
		set  *bool
		name string
	}{{s.ReadOnly, "read-only"}, {s.ResetRequired, "reset-required"}, {s.Unique, "unique"}} {
		if b.set != nil && *b.set {
			f = append(f, b.name)
		}
	}
	return strings.Join(f, ",")
}

// firmwareCmd is "anvil node firmware NODE".
func firmwareCmd(ctx context.Context, dial connect, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("firmware", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the components as the API returns them")
	pos, err := cli.Parse(fs, firmwareUsage, args, "NODE")
	if err != nil {
		return err
	}
	node := pos[0]
	c, err := dial()
	if err != nil {
		return err
	}
	comps, err := c.Firmware(ctx, node)
	var apiErr *client.Error
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusNotAcceptable {
		return fmt.Errorf("the controller's API does not serve firmware versions (they need API %s): %w", client.FirmwareVersion, err)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(out, comps)
	}
	if len(comps) == 0 {
		why, err := c.FirmwareReason(ctx, node)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(out, why)
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COMPONENT\tINITIAL\tCURRENT\tLAST FLASHED\tUPDATED")
	for _, f := range comps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", f.Component, orDash(f.InitialVersion), orDash(f.CurrentVersion),
			deref(f.LastVersionFlashed, "-"), deref(f.UpdatedAt, "-"))
	}
	return tw.Flush()
}

func printJSON(out io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, string(b))
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
