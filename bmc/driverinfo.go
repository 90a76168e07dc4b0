package bmc

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Hardware types understood by ParseDriverInfo (Ironic's names).
const (
	HardwareIPMI    = "ipmi"
	HardwareRedfish = "redfish"
	HardwareFake    = "fake-hardware"
)

// HardwareTypes lists the hardware types this package can drive.
func HardwareTypes() []string {
	return []string{HardwareFake, HardwareIPMI, HardwareRedfish}
}

// Target is a validated BMC address and credentials for one node, built by
// ParseDriverInfo. It is a value: copy it freely. Its LogValue never contains
// the password, so it is safe to log.
type Target struct {
	// HardwareType is one of HardwareTypes().
	HardwareType string
	// ID identifies the node behind the BMC (the controller sets the node
	// UUID). It keys the in-memory fake-hardware state and appears in logs.
	ID string

	// Host is the BMC's host name or IP address (no brackets, no port).
	Host string
	// Port is the UDP (IPMI) or TCP (Redfish) port.
	Port     int
	Username string
	Password string

	// IPMI only.
	PrivLevel   string // ADMINISTRATOR, OPERATOR or USER (ipmitool -L); "" means ADMINISTRATOR, Ironic's default
	CipherSuite string // ipmitool -C; "" tries 3, then 17 if 3 cannot open a session

	// Redfish only.
	Scheme   string // "http" or "https"
	SystemID string // e.g. /redfish/v1/Systems/node-1; "" = the only system
	VerifyCA bool   // verify the BMC's TLS certificate
	CAFile   string // CA bundle to verify with; "" = system roots
}

// WithID returns a copy of t identifying node id.
func (t Target) WithID(id string) Target {
	t.ID = id
	return t
}

// Endpoint is host:port, the identity used to serialise commands to one BMC.
func (t Target) Endpoint() string {
	return net.JoinHostPort(t.Host, strconv.Itoa(t.Port))
}

// key identifies the physical BMC: several nodes may share one (a chassis
// manager or a virtual BMC with several systems), and commands to it must be
// serialised whichever node they are for.
func (t Target) key() string {
	if t.HardwareType == HardwareFake {
		return HardwareFake + "/" + t.ID
	}
	return t.HardwareType + "/" + t.Endpoint()
}

// LogValue implements slog.LogValuer without the password.
func (t Target) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("type", t.HardwareType)}
	if t.ID != "" {
		attrs = append(attrs, slog.String("node", t.ID))
	}
	if t.HardwareType != HardwareFake {
		attrs = append(attrs, slog.String("endpoint", t.Endpoint()), slog.String("username", t.Username))
	}
	if t.SystemID != "" {
		attrs = append(attrs, slog.String("system_id", t.SystemID))
	}
	return slog.GroupValue(attrs...)
}

// String masks the password too, for %v in error messages.
func (t Target) String() string {
	if t.HardwareType == HardwareFake {
		return fmt.Sprintf("%s node=%s", t.HardwareType, t.ID)
	}
	return fmt.Sprintf("%s %s@%s", t.HardwareType, t.Username, t.Endpoint())
}

// SecretKeys lists the driver_info keys known to hold secrets.
func SecretKeys() []string {
	return []string{"ipmi_password", "redfish_password"}
}

// IsSecret reports whether a driver_info key must be masked ("******") when
// shown: the known password keys and, like Ironic, anything whose name
// contains password, secret or token.
func IsSecret(key string) bool {
	k := strings.ToLower(key)
	if slices.Contains(SecretKeys(), k) {
		return true
	}
	for _, s := range []string{"password", "secret", "token"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

// MaskedValue is what the API shows instead of a secret.
const MaskedValue = "******"

// MaskDriverInfo returns a copy of driverInfo with secret values replaced by
// MaskedValue. Nested values are copied by reference (driver_info is flat).
func MaskDriverInfo(driverInfo map[string]any) map[string]any {
	out := make(map[string]any, len(driverInfo))
	for k, v := range driverInfo {
		if IsSecret(k) && v != nil {
			v = MaskedValue
		}
		out[k] = v
	}
	return out
}

// ParseDriverInfo validates Ironic driver_info for a hardware type and
// returns the Target to pass to the Manager. The error wraps
// ErrInvalidDriverInfo (or ErrUnsupported for an unknown hardware type) and
// lists every missing or malformed key at once, so an operator fixes them in
// one round. Keys of other interfaces (deploy_kernel, ...) are ignored.
func ParseDriverInfo(hardwareType string, driverInfo map[string]any) (Target, error) {
	p := parser{info: driverInfo}
	t := Target{HardwareType: hardwareType}
	switch hardwareType {
	case HardwareFake:
		return t, nil
	case HardwareIPMI:
		t.Host = p.host("ipmi_address")
		t.Port = p.port("ipmi_port", 623)
		t.Username = p.str("ipmi_username")
		t.Password = p.str("ipmi_password")
		t.PrivLevel = p.oneOf("ipmi_priv_level", "ADMINISTRATOR", "OPERATOR", "USER")
		t.CipherSuite = p.cipherSuite("ipmi_cipher_suite")
	case HardwareRedfish:
		p.redfishAddress("redfish_address", &t)
		t.SystemID = p.systemID("redfish_system_id")
		t.Username = p.str("redfish_username")
		t.Password = p.str("redfish_password")
		t.VerifyCA, t.CAFile = p.verifyCA("redfish_verify_ca")
	default:
		return Target{}, fmt.Errorf("%w: hardware type %q (known: %s)", ErrUnsupported, hardwareType, strings.Join(HardwareTypes(), ", "))
	}
	if len(p.problems) > 0 {
		return Target{}, fmt.Errorf("%w for hardware type %s: %s", ErrInvalidDriverInfo, hardwareType, strings.Join(p.problems, "; "))
	}
	return t, nil
}

// parser collects every problem instead of stopping at the first one.
type parser struct {
	info     map[string]any
	problems []string
}

func (p *parser) fail(format string, args ...any) {
	p.problems = append(p.problems, fmt.Sprintf(format, args...))
}

// raw returns the value as a trimmed string; ok=false when absent or null.
// Numbers arrive as float64 (JSON), json.Number or Go ints.
func (p *parser) raw(key string) (string, bool) {
	v, ok := p.info[key]
	if !ok || v == nil {
		return "", false
	}
	switch x := v.(type) {
	case string:
		return strings.TrimSpace(x), true
	case json.Number:
		return x.String(), true
	case float64:
		if x != math.Trunc(x) {
			return strconv.FormatFloat(x, 'f', -1, 64), true
		}
		return strconv.FormatInt(int64(x), 10), true
	case float32, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, bool:
		return fmt.Sprint(x), true
	default:
		// Never echo the value: it could be a secret in the wrong key.
		p.fail("%s: must be a string or number, got %T", key, v)
		return "", false
	}
}

func (p *parser) str(key string) string {
	s, _ := p.raw(key)
	return s
}

func (p *parser) host(key string) string {
	s, ok := p.raw(key)
	switch {
	case !ok || s == "":
		p.fail("%s: required", key)
		return ""
	case strings.Contains(s, "://"):
		p.fail("%s: %q must be a host name or IP address, not a URL", key, s)
		return ""
	case strings.ContainsAny(s, " /\t"):
		p.fail("%s: %q is not a valid host name or IP address", key, s)
		return ""
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if strings.Count(s, ":") == 1 {
		p.fail("%s: %q must not contain a port; use ipmi_port", key, s)
		return ""
	}
	return s
}

func (p *parser) port(key string, def int) int {
	s, ok := p.raw(key)
	if !ok || s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		p.fail("%s: %q is not a port number (1-65535)", key, s)
		return 0
	}
	return n
}

func (p *parser) oneOf(key string, allowed ...string) string {
	s, ok := p.raw(key)
	if !ok || s == "" {
		return ""
	}
	u := strings.ToUpper(s)
	if !slices.Contains(allowed, u) {
		p.fail("%s: %q is not one of %s", key, s, strings.Join(allowed, ", "))
		return ""
	}
	return u
}

func (p *parser) cipherSuite(key string) string {
	s, ok := p.raw(key)
	if !ok || s == "" {
		return ""
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 17 {
		p.fail("%s: %q is not an IPMI cipher suite id (0-17)", key, s)
		return ""
	}
	return strconv.Itoa(n)
}

// redfishAddress follows Ironic: a URL; without a scheme https is assumed.
func (p *parser) redfishAddress(key string, t *Target) {
	s, ok := p.raw(key)
	if !ok || s == "" {
		p.fail("%s: required", key)
		return
	}
	if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		p.fail("%s: %q is not a URL: %v", key, s, err)
		return
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		p.fail("%s: scheme %q is not http or https", key, u.Scheme)
		return
	}
	if u.User != nil {
		p.fail("%s: credentials belong in redfish_username/redfish_password, not in the URL", key)
		return
	}
	if u.Hostname() == "" {
		p.fail("%s: %q has no host", key, s)
		return
	}
	if path := strings.TrimSuffix(u.Path, "/"); path != "" && path != "/redfish/v1" {
		p.fail("%s: %q must not have a path (the service root is always /redfish/v1)", key, s)
		return
	}
	t.Scheme, t.Host = u.Scheme, u.Hostname()
	t.Port = 443
	if u.Scheme == "http" {
		t.Port = 80
	}
	if ps := u.Port(); ps != "" {
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > 65535 {
			p.fail("%s: port %q is not a port number (1-65535)", key, ps)
			return
		}
		t.Port = n
	}
}

func (p *parser) systemID(key string) string {
	s, ok := p.raw(key)
	if !ok || s == "" {
		return ""
	}
	if !strings.HasPrefix(s, "/") {
		p.fail("%s: %q must be a path such as /redfish/v1/Systems/1", key, s)
		return ""
	}
	return strings.TrimSuffix(s, "/")
}

// verifyCA: a boolean (or its string form) or the path of a CA bundle.
func (p *parser) verifyCA(key string) (bool, string) {
	v, present := p.info[key]
	if !present || v == nil {
		return true, ""
	}
	if b, ok := v.(bool); ok {
		return b, ""
	}
	s, ok := p.raw(key)
	if !ok {
		return true, ""
	}
	switch strings.ToLower(s) {
	case "true", "yes", "1", "on":
		return true, ""
	case "false", "no", "0", "off":
		return false, ""
	}
	if st, err := os.Stat(s); err != nil || st.IsDir() {
		p.fail("%s: %q is neither a boolean nor a readable CA bundle file", key, s)
		return true, ""
	}
	return true, s
}

// GoString keeps %#v from printing the password.
func (t Target) GoString() string { return "bmc.Target{" + t.String() + "}" }
