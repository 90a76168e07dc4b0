package disk

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/anvil-metal/anvil/internal/textlist"
)

// ErrNoMatch is returned when no disk satisfies the root device hints.
var ErrNoMatch = errors.New("no disk matches the root device hints")

// Ironic's default minimum root disk: with no hints IPA picks the smallest
// disk of at least 4 GiB.
const minRootDiskBytes = 4 << 30

var knownHints = []string{"size", "model", "vendor", "serial", "wwn", "name", "rotational", "by_path"}

// SelectRootDevice picks the deploy disk the way Ironic's root device hints
// do. hints is the node's properties.root_device dict: size is in GiB and
// accepts the integer operators ("==", "!=", ">=", "<=", ">", "<", "<or>");
// strings accept "s==", "s!=", "<in>" and "<or>", default equality, compared
// case-insensitively; rotational is a boolean; name accepts "sda" or
// "/dev/sda". Disks that are read-only, virtual media, optical drives or md
// members are never candidates. With no hints the smallest disk of at least
// 4 GiB wins; with hints the first match in name order.
func SelectRootDevice(disks []Disk, hints map[string]any) (Disk, error) {
	for k := range hints {
		if !slices.Contains(knownHints, k) {
			return Disk{}, fmt.Errorf("unsupported root device hint %q (supported: %s)", k, strings.Join(knownHints, ", "))
		}
	}
	var cands []Disk
	for _, d := range disks {
		if d.ReadOnly || d.VirtualMedia || d.Optical || d.IsMDMember() {
			continue
		}
		cands = append(cands, d)
	}
	slices.SortFunc(cands, func(a, b Disk) int { return strings.Compare(a.Name, b.Name) })
	if len(hints) == 0 {
		var best *Disk
		for i, d := range cands {
			if d.Size >= minRootDiskBytes && (best == nil || d.Size < best.Size) {
				best = &cands[i]
			}
		}
		if best == nil {
			return Disk{}, fmt.Errorf("%w: no writable disk of at least 4 GiB", ErrNoMatch)
		}
		return *best, nil
	}
	for _, d := range cands {
		ok, err := Matches(d, hints)
		if err != nil {
			return Disk{}, err
		}
		if ok {
			return d, nil
		}
	}
	return Disk{}, fmt.Errorf("%w: %v", ErrNoMatch, hints)
}

// Matches reports whether one disk satisfies every hint.
func Matches(d Disk, hints map[string]any) (bool, error) {
	for k, v := range hints {
		var ok bool
		var err error
		switch k {
		case "size":
			ok, err = matchInt(int64(d.Size>>30), v)
		case "rotational":
			var want bool
			want, err = toBool(v)
			ok = want == d.Rotational
		case "name":
			ok, err = matchString(d.Path, normaliseName(v))
		case "model":
			ok, err = matchString(d.Model, v)
		case "vendor":
			ok, err = matchString(d.Vendor, v)
		case "serial":
			ok, err = matchString(d.Serial, v)
		case "wwn":
			ok, err = matchString(d.WWN, v)
		case "by_path":
			ok, err = matchString(d.ByPath, v)
		default:
			err = fmt.Errorf("unsupported root device hint %q", k)
		}
		if err != nil {
			return false, fmt.Errorf("root device hint %s=%v: %w", k, v, err)
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

func normaliseName(v any) any {
	s, ok := v.(string)
	if !ok {
		return v
	}
	op, rest := splitOp(s)
	if op == "<or>" {
		parts := splitOr(s)
		for i, p := range parts {
			if !strings.HasPrefix(p, "/dev/") {
				parts[i] = "/dev/" + p
			}
		}
		return "<or> " + strings.Join(parts, " <or> ")
	}
	if !strings.HasPrefix(rest, "/dev/") && op != "<in>" {
		rest = "/dev/" + rest
	}
	if op == "" {
		return rest
	}
	return op + " " + rest
}

var ops = []string{"<or>", "<in>", "s==", "s!=", "s>=", "s<=", "==", "!=", ">=", "<=", ">", "<"}

func splitOp(s string) (string, string) {
	s = strings.TrimSpace(s)
	for _, op := range ops {
		if rest, ok := strings.CutPrefix(s, op); ok {
			return op, strings.TrimSpace(rest)
		}
	}
	return "", s
}

// splitOr splits a hint's alternatives ("sda <or> sdb").
func splitOr(s string) []string { return textlist.Split(s, "<or>") }

func matchString(have string, want any) (bool, error) {
	s, ok := want.(string)
	if !ok {
		return false, fmt.Errorf("want a string, got %T", want)
	}
	h := strings.ToLower(strings.TrimSpace(have))
	op, rest := splitOp(s)
	rest = strings.ToLower(rest)
	switch op {
	case "", "s==", "==":
		return h == rest, nil
	case "s!=", "!=":
		return h != rest, nil
	case "<in>":
		return strings.Contains(h, rest), nil
	case "<or>":
		for _, alt := range splitOr(strings.ToLower(s)) {
			if h == alt {
				return true, nil
			}
		}
		return false, nil
	}
	return false, fmt.Errorf("operator %q is not valid for strings", op)
}

func matchInt(have int64, want any) (bool, error) {
	switch w := want.(type) {
	case int:
		return have == int64(w), nil
	case int64:
		return have == w, nil
	case float64:
		return float64(have) == w, nil
	case string:
		op, rest := splitOp(w)
		if op == "<or>" {
			for _, alt := range splitOr(w) {
				n, err := strconv.ParseInt(alt, 10, 64)
				if err != nil {
					return false, err
				}
				if have == n {
					return true, nil
				}
			}
			return false, nil
		}
		n, err := strconv.ParseInt(rest, 10, 64)
		if err != nil {
			return false, fmt.Errorf("not an integer: %q", rest)
		}
		switch op {
		case "", "==":
			return have == n, nil
		case "!=":
			return have != n, nil
		case ">=":
			return have >= n, nil
		case "<=":
			return have <= n, nil
		case ">":
			return have > n, nil
		case "<":
			return have < n, nil
		}
		return false, fmt.Errorf("operator %q is not valid for integers", op)
	}
	return false, fmt.Errorf("want an integer, got %T", want)
}

func toBool(v any) (bool, error) {
	switch b := v.(type) {
	case bool:
		return b, nil
	case string:
		return strconv.ParseBool(strings.TrimSpace(b))
	case float64:
		return b != 0, nil
	case int:
		return b != 0, nil
	}
	return false, fmt.Errorf("want a boolean, got %T", v)
}
