package conductor

// The firmware steps' arguments: firmware.update's settings (which
// component, from which URL, with which checksum and version) and
// firmware.verify's baseline, checked before a request is accepted and
// again when the step runs; and the image checksum, verified by the
// controller before the BMC is asked to flash anything.

import (
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// firmwareSteps are the firmware interface's steps. update is manual only
// (priority 0, as Ironic's); verify runs in automated cleaning, first,
// when the node declares a baseline (properties.firmware_baseline), so
// a node with unexpected firmware never reaches available.
func firmwareSteps(n *store.Node) []protocol.Step {
	verify := 0
	if _, ok := n.Properties[baselineProperty]; ok {
		verify = firmwareVerifyPriority
	}
	return []protocol.Step{
		{Interface: protocol.InterfaceFirmware, Step: "update", Priority: 0, RebootRequested: true,
			ArgsInfo: map[string]protocol.ArgInfo{"settings": {Description: "A list of dicts with keys component (bios, bmc or nic:<id>), url, and optionally checksum (sha256 or sha512 hex, 'algo:hex' accepted), version (the version the image installs; needed to flash the version already running) and wait (seconds before the version is read back)", Required: true}}},
		{Interface: protocol.InterfaceFirmware, Step: "verify", Priority: verify,
			ArgsInfo: map[string]protocol.ArgInfo{"baseline": {Description: "component -> allowed version or list of versions; default: the node's properties.firmware_baseline"}}},
	}
}

const (
	baselineProperty       = "firmware_baseline"
	firmwareVerifyPriority = 100 // before the agent's erase steps (99 and 10)
)

// firmwareSetting is one entry of firmware.update's settings.
type firmwareSetting struct {
	Component, URL, Checksum, Version string
	Wait                              int
}

// updateSettings parses firmware.update's settings and orders them as
// they are flashed: the BMC first (a new BMC may be needed to flash the
// rest), then the BIOS, then NICs, each component once.
func updateSettings(args map[string]any) ([]firmwareSetting, error) {
	raw, ok := args["settings"].([]any)
	if !ok || len(raw) == 0 {
		return nil, fmt.Errorf("argument settings must be a non-empty list of {component, url}")
	}
	var out []firmwareSetting
	seen := map[string]bool{}
	for i, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("settings[%d] must be an object with component and url", i)
		}
		var s firmwareSetting
		text := map[string]*string{"component": &s.Component, "url": &s.URL, "checksum": &s.Checksum, "version": &s.Version}
		for k, v := range m {
			dst, isText := text[k]
			switch {
			case isText:
				str, ok := v.(string)
				if !ok {
					return nil, fmt.Errorf("settings[%d].%s must be a string", i, k)
				}
				*dst = str
			case k == "wait":
				f, ok := v.(float64)
				if !ok || f < 0 || f > 86400 || f != float64(int(f)) {
					return nil, fmt.Errorf("settings[%d].wait must be whole seconds between 0 and 86400", i)
				}
				s.Wait = int(f)
			default:
				return nil, fmt.Errorf("settings[%d] has an unknown key %q (component, url, checksum, version, wait)", i, k)
			}
		}
		if s.Component != bmc.ComponentBIOS && s.Component != bmc.ComponentBMC && !bmc.IsNICComponent(s.Component) {
			return nil, fmt.Errorf("settings[%d].component %q is not bios, bmc or nic:<id>", i, s.Component)
		}
		if seen[s.Component] {
			return nil, fmt.Errorf("settings name component %s twice", s.Component)
		}
		seen[s.Component] = true
		u, err := url.Parse(s.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("settings[%d].url %q is not an http or https URL (the BMC downloads the image from it)", i, s.URL)
		}
		if s.Checksum != "" {
			if _, _, err := parseChecksum(s.Checksum); err != nil {
				return nil, fmt.Errorf("settings[%d].checksum: %w", i, err)
			}
		}
		out = append(out, s)
	}
	slices.SortStableFunc(out, func(a, b firmwareSetting) int { return componentRank(a.Component) - componentRank(b.Component) })
	return out, nil
}

func componentRank(c string) int {
	switch c {
	case bmc.ComponentBMC:
		return 0
	case bmc.ComponentBIOS:
		return 1
	}
	return 2
}

// parseChecksum accepts "<hex>" (SHA-256 or SHA-512 by its length) and
// "sha256:<hex>" / "sha512:<hex>".
func parseChecksum(s string) (func() hash.Hash, []byte, error) {
	algo, hexs, found := strings.Cut(s, ":")
	if !found {
		hexs, algo = s, ""
	}
	sum, err := hex.DecodeString(hexs)
	if err != nil {
		return nil, nil, fmt.Errorf("%q is not hexadecimal", hexs)
	}
	switch {
	case (algo == "" || algo == "sha256") && len(sum) == sha256.Size:
		return sha256.New, sum, nil
	case (algo == "" || algo == "sha512") && len(sum) == sha512.Size:
		return sha512.New, sum, nil
	}
	return nil, nil, fmt.Errorf("%q is neither a SHA-256 nor a SHA-512 checksum", s)
}

// maxFirmwareImage bounds the image the controller reads to check it.
const maxFirmwareImage = 4 << 30

// checkImage downloads the image and compares its checksum, so that a
// wrong or corrupt image fails the step before the BMC flashes anything.
func checkImage(ctx context.Context, client *http.Client, s firmwareSetting) error {
	newHash, want, err := parseChecksum(s.Checksum)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("downloading %s to check its checksum: %w", s.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("downloading %s to check its checksum: HTTP %s", s.URL, resp.Status)
	}
	h := newHash()
	n, err := io.Copy(h, io.LimitReader(resp.Body, maxFirmwareImage+1))
	if err != nil {
		return fmt.Errorf("downloading %s to check its checksum: %w", s.URL, err)
	}
	if n > maxFirmwareImage {
		return fmt.Errorf("%s is larger than %d bytes", s.URL, int64(maxFirmwareImage))
	}
	if got := h.Sum(nil); !slices.Equal(got, want) {
		return fmt.Errorf("the image at %s has checksum %x, not %x as asked: nothing was flashed", s.URL, got, want)
	}
	return nil
}

// baseline is firmware.verify's: component -> allowed versions.
type baseline map[string][]string

// baselineArg reads the step's baseline argument, else the node's
// properties.firmware_baseline (a map, or a JSON text of one, as
// properties set from the CLI often are).
func baselineArg(n *store.Node, args map[string]any) (baseline, error) {
	v, ok := args["baseline"]
	where := "argument baseline"
	if !ok {
		v, ok = n.Properties[baselineProperty]
		where = "properties." + baselineProperty
	}
	if !ok {
		return nil, fmt.Errorf("no firmware baseline: give the step a baseline argument or set the node's properties.%s", baselineProperty)
	}
	if s, isText := v.(string); isText {
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			return nil, fmt.Errorf("%s is not a JSON object: %w", where, err)
		}
	}
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return nil, fmt.Errorf("%s must be a non-empty object of component -> version or list of versions", where)
	}
	out := baseline{}
	for comp, want := range m {
		if comp != bmc.ComponentBIOS && comp != bmc.ComponentBMC && !bmc.IsNICComponent(comp) && !bmc.IsDiskComponent(comp) {
			return nil, fmt.Errorf("%s: component %q is not bios, bmc, nic:<id> or disk:<id>", where, comp)
		}
		switch w := want.(type) {
		case string:
			out[comp] = []string{w}
		case []any:
			for _, x := range w {
				s, ok := x.(string)
				if !ok {
					return nil, fmt.Errorf("%s: %s's versions must be strings", where, comp)
				}
				out[comp] = append(out[comp], s)
			}
			if len(out[comp]) == 0 {
				return nil, fmt.Errorf("%s: %s allows no version", where, comp)
			}
		default:
			return nil, fmt.Errorf("%s: %s must be a version or a list of versions", where, comp)
		}
	}
	return out, nil
}

// check names each component whose version the baseline does not allow.
func (b baseline) check(comps []bmc.FirmwareComponent) error {
	have := map[string]string{}
	for _, c := range comps {
		have[c.Component] = c.Version
	}
	var bad []string
	for _, comp := range slices.Sorted(maps.Keys(b)) {
		v, ok := have[comp]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("%s: the BMC reports no such component", comp))
		case !slices.Contains(b[comp], v):
			bad = append(bad, fmt.Sprintf("%s runs %s, the baseline allows %s", comp, v, strings.Join(b[comp], " or ")))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("firmware differs from the baseline: %s", strings.Join(bad, "; "))
	}
	return nil
}
