// Package configdrive turns a deploy's configdrive (Ironic's instance_info
// configdrive) into what the agent writes: a JSON object is built into an
// ISO9660 image labelled config-2 (Ironic's build_configdrive, through
// openstacksdk's configdrive layout) and sent gzipped and base64-encoded;
// a base64 gzipped ISO is checked and passed on; an HTTP(S) URL is passed
// on for the agent to download, as ironic-python-agent does.
//
// The ISO is built in pure Go with go-diskfs (its iso9660 writer, Rock
// Ridge for the lower-case long names cloud-init reads): the controller
// is a static binary and cannot count on genisoimage or xorriso at run
// time, which is what Ironic shells out to.
package configdrive

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"

	"github.com/anvil-metal/anvil/protocol"
)

// MaxISOBytes bounds a configdrive image: it goes into a partition of
// 64 MiB at most (ironic-lib's MAX_CONFIG_DRIVE_SIZE_MB).
const MaxISOBytes = protocol.MaxConfigDriveBytes

// MaxInlineBytes bounds the gzipped, base64-encoded configdrive the
// controller sends to its agent inside a command: the agent reads a
// controller message of at most protocol.MaxMessageBytes (4 MiB), which
// also holds the rest of the command. A larger one must be given as a URL
// the agent downloads.
const MaxInlineBytes = 3 << 20

// Label is the volume label of a configdrive (cloud-init's ConfigDrive
// datasource looks for it).
const Label = "config-2"

// versions are the metadata versions written, openstacksdk's default.
var versions = [...]string{"2012-08-10", "latest"}

// IsURL reports whether a string configdrive is a URL (Ironic: ':' is not
// a base64 symbol, so "://" tells a URL from content).
func IsURL(s string) bool { return strings.Contains(s, "://") }

// Validate is Ironic's check_allow_configdrive on the configdrive value
// of a provision request (the target and the version of the object form
// are the API's to check): an object of meta_data, network_data,
// user_data and vendor_data, a URL, or a base64 string. The message is
// the one of Ironic's 400.
func Validate(v any) error {
	switch cd := v.(type) {
	case nil:
		return nil
	case map[string]any:
		for k, val := range cd {
			switch k {
			case "meta_data", "network_data", "vendor_data":
				if _, ok := val.(map[string]any); !ok {
					return formatErrorf("%s must be an object, got %s", k, jsonType(val))
				}
			case "user_data":
				switch val.(type) {
				case nil, string, map[string]any, []any:
				default:
					return formatErrorf("user_data must be an object, an array, a string or null, got %s", jsonType(val))
				}
			default:
				return formatErrorf("Additional properties are not allowed ('%s' was unexpected)", k)
			}
		}
		return nil
	case string:
		if IsURL(cd) {
			if !strings.HasPrefix(cd, "http://") && !strings.HasPrefix(cd, "https://") {
				return formatErrorf("a configdrive URL must be http:// or https://")
			}
			return nil
		}
		for _, r := range cd {
			if !isB64(r) {
				return formatErrorf("it is neither a JSON, nor a URL, nor a base64 string")
			}
		}
		return nil
	}
	return formatErrorf("%s is not valid under any of the given schemas", jsonType(v))
}

// FormatError is a configdrive of the wrong shape; its text is Ironic's
// 400.
type FormatError struct{ Detail string }

func (e *FormatError) Error() string { return "Invalid configdrive format: " + e.Detail }

func formatErrorf(format string, args ...any) error {
	return &FormatError{Detail: fmt.Sprintf(format, args...)}
}

func isB64(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("+/=\n\r\t ", r)
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case float64, json.Number:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// ForAgent is what the agent's write_image receives as its configdrive
// argument for a node's instance_info configdrive: "" when there is none,
// the URL as given, or a base64 gzipped ISO (built from an object, checked
// when given). Errors say what is wrong with the configdrive; they fail
// the deploy.
func ForAgent(nodeUUID, nodeName string, v any) (string, error) {
	var s string
	switch cd := v.(type) {
	case nil:
		return "", nil
	case map[string]any:
		iso, err := Build(nodeUUID, nodeName, cd)
		if err != nil {
			return "", err
		}
		if s, err = Encode(iso); err != nil {
			return "", err
		}
	case string:
		if cd == "" {
			return "", nil
		}
		if IsURL(cd) {
			if err := Validate(cd); err != nil {
				return "", err
			}
			return cd, nil
		}
		if _, err := Decode(cd); err != nil {
			return "", err
		}
		s = cd
	default:
		return "", Validate(v)
	}
	if len(s) > MaxInlineBytes {
		return "", fmt.Errorf("configdrive is %d bytes gzipped and base64-encoded; the controller sends at most %d to its agent: serve it over HTTP(S) and give its URL as configdrive", len(s), MaxInlineBytes)
	}
	return s, nil
}

// Build makes the ISO9660 image of a configdrive object: for each version
// (2012-08-10 and latest), openstack/<version>/meta_data.json (with the
// node's uuid and name unless given), user_data (a string as is, an
// object or array as JSON), network_data.json and vendor_data2.json when
// given, labelled config-2.
func Build(nodeUUID, nodeName string, cd map[string]any) ([]byte, error) {
	if err := Validate(cd); err != nil {
		return nil, err
	}
	meta := map[string]any{}
	if m, ok := cd["meta_data"].(map[string]any); ok {
		for k, v := range m {
			meta[k] = v
		}
	}
	if _, ok := meta["uuid"]; !ok {
		meta["uuid"] = nodeUUID
	}
	if _, ok := meta["name"]; !ok && nodeName != "" {
		meta["name"] = nodeName
	}
	files := map[string][]byte{}
	var err error
	if files["meta_data.json"], err = json.Marshal(meta); err != nil {
		return nil, fmt.Errorf("configdrive meta_data: %w", err)
	}
	switch u := cd["user_data"].(type) {
	case string:
		if u != "" {
			files["user_data"] = []byte(u)
		}
	case map[string]any, []any:
		if files["user_data"], err = json.Marshal(u); err != nil {
			return nil, fmt.Errorf("configdrive user_data: %w", err)
		}
	}
	for key, name := range map[string]string{"network_data": "network_data.json", "vendor_data": "vendor_data2.json"} {
		if v, ok := cd[key].(map[string]any); ok && len(v) > 0 {
			if files[name], err = json.Marshal(v); err != nil {
				return nil, fmt.Errorf("configdrive %s: %w", key, err)
			}
		}
	}
	total := 0
	for _, b := range files {
		total += len(b)
	}
	if total*len(versions) > MaxISOBytes {
		return nil, fmt.Errorf("configdrive content is %d bytes, more than the %d a configdrive partition holds", total*len(versions), MaxISOBytes)
	}
	return buildISO(files)
}

// buildISO writes the files under openstack/<version>/ of a Rock Ridge
// ISO labelled config-2. go-diskfs stages the tree in a directory and
// writes the image to a file: both are temporary.
func buildISO(files map[string][]byte) ([]byte, error) {
	dir, err := os.MkdirTemp("", "anvil-configdrive-")
	if err != nil {
		return nil, fmt.Errorf("configdrive: %w", err)
	}
	defer os.RemoveAll(dir)
	out, err := os.CreateTemp("", "anvil-configdrive-*.iso")
	if err != nil {
		return nil, fmt.Errorf("configdrive: %w", err)
	}
	defer os.Remove(out.Name())
	defer out.Close()
	fsys, err := iso9660.Create(file.New(out, false), 0, 0, 2048, dir)
	if err != nil {
		return nil, fmt.Errorf("configdrive: create ISO: %w", err)
	}
	for _, v := range versions {
		d := path.Join("/openstack", v)
		if err := fsys.Mkdir(d); err != nil {
			return nil, fmt.Errorf("configdrive: mkdir %s: %w", d, err)
		}
		for name, b := range files {
			if err := writeFile(fsys, path.Join(d, name), b); err != nil {
				return nil, err
			}
		}
	}
	if err := fsys.Finalize(iso9660.FinalizeOptions{RockRidge: true, VolumeIdentifier: Label, PublisherIdentifier: "anvil"}); err != nil {
		return nil, fmt.Errorf("configdrive: write ISO: %w", err)
	}
	iso, err := io.ReadAll(io.NewSectionReader(out, 0, MaxISOBytes+1))
	if err != nil {
		return nil, fmt.Errorf("configdrive: read ISO: %w", err)
	}
	if len(iso) > MaxISOBytes {
		return nil, fmt.Errorf("configdrive ISO is larger than %d bytes", MaxISOBytes)
	}
	// go-diskfs pads the volume identifier with NULs; ISO 9660 (and
	// genisoimage, which Ironic uses) pads it with spaces.
	if len(iso) >= 17*2048 {
		vid := iso[16*2048+40 : 16*2048+72]
		for i := len(Label); i < len(vid); i++ {
			vid[i] = ' '
		}
	}
	return iso, nil
}

func writeFile(fsys filesystem.FileSystem, name string, b []byte) error {
	f, err := fsys.OpenFile(name, os.O_CREATE|os.O_RDWR)
	if err != nil {
		return fmt.Errorf("configdrive: create %s: %w", name, err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("configdrive: write %s: %w", name, err)
	}
	return f.Close()
}

// Encode gzips and base64-encodes an ISO, the form Ironic hands its agent.
func Encode(iso []byte) (string, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(iso); err != nil {
		return "", fmt.Errorf("configdrive: gzip: %w", err)
	}
	if err := zw.Close(); err != nil {
		return "", fmt.Errorf("configdrive: gzip: %w", err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

// Decode reads a base64 gzipped configdrive (protocol.DecodeConfigDrive,
// which the agent uses too).
func Decode(s string) ([]byte, error) { return protocol.DecodeConfigDrive(s) }
