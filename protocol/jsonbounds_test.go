package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func nested(open, close string, depth int) string {
	return strings.Repeat(open, depth) + strings.Repeat(close, depth)
}

func TestCheckJSON(t *testing.T) {
	for name, tc := range map[string]struct {
		doc    string
		fault  JSONFault // 0: accepted
		offset int
	}{
		"object":               {doc: ` {"a": [1, -2.5e+3, true, false, null, "x"], "b": {}} `},
		"scalars":              {doc: `"x"`},
		"number":               {doc: `-0.0E-0`},
		"32 levels":            {doc: nested("[", "]", 32)},
		"33 levels":            {doc: nested("[", "]", 33), fault: JSONTooDeep, offset: 32},
		"33 mixed":             {doc: `{"a":` + nested(`[{"b":`, `}]`, 16) + `}`, fault: JSONTooDeep, offset: 96},
		"3,000 levels":         {doc: nested("[", "]", 3000), fault: JSONTooDeep, offset: 32},
		"escapes":              {doc: `"\" \\ \/ \b \f \n \r \t \u00e9 \uD83D\uDE00"`},
		"UTF-8":                {doc: `{"café ✓ 😀":"ß"}`},
		"NUL escape":           {doc: `{"a":"x\u0000"}`, fault: JSONNUL, offset: 7},
		"NUL in a key":         {doc: `{"\u0000":1}`, fault: JSONNUL, offset: 2},
		"raw NUL":              {doc: "[\"a\x00\"]", fault: JSONNUL, offset: 3},
		"raw NUL outside":      {doc: "[1,\x00]", fault: JSONSyntax, offset: 3},
		"invalid byte":         {doc: "[\"caf\xe9\"]", fault: JSONInvalidUTF8, offset: 5},
		"truncated character":  {doc: "[\"\xc3\"]", fault: JSONInvalidUTF8, offset: 2},
		"encoded surrogate":    {doc: "[\"\xed\xa0\x80\"]", fault: JSONInvalidUTF8, offset: 2},
		"lone high surrogate":  {doc: `["a\ud800b"]`, fault: JSONSurrogate, offset: 3},
		"high then not low":    {doc: `["\ud800\u0041"]`, fault: JSONSurrogate, offset: 2},
		"lone low surrogate":   {doc: `["\uDC00"]`, fault: JSONSurrogate, offset: 2},
		"high at the end":      {doc: `"\ud800`, fault: JSONSurrogate, offset: 1},
		"bad escape":           {doc: `"\x"`, fault: JSONSyntax, offset: 2},
		"bad hex":              {doc: `"\u12g4"`, fault: JSONSyntax, offset: 3},
		"empty":                {doc: ``, fault: JSONSyntax},
		"trailing data":        {doc: `{} {}`, fault: JSONSyntax, offset: 3},
		"trailing comma":       {doc: `[1,]`, fault: JSONSyntax, offset: 3},
		"leading zero":         {doc: `01`, fault: JSONSyntax, offset: 1},
		"bare minus":           {doc: `-`, fault: JSONSyntax, offset: 1},
		"unquoted key":         {doc: `{a:1}`, fault: JSONSyntax, offset: 1},
		"control in a string":  {doc: "\"a\tb\"", fault: JSONSyntax, offset: 2},
		"unterminated":         {doc: `{"a":"b`, fault: JSONSyntax, offset: 7},
		"literal":              {doc: `nul`, fault: JSONSyntax},
		"deep after a problem": {doc: `[1,]` + nested("[", "]", 40), fault: JSONSyntax, offset: 3},
	} {
		t.Run(name, func(t *testing.T) {
			err := CheckJSON([]byte(tc.doc))
			if tc.fault == 0 {
				require.NoError(t, err)
				assert.True(t, json.Valid([]byte(tc.doc)))
				return
			}
			var je *JSONError
			require.ErrorAs(t, err, &je)
			assert.Equal(t, tc.fault, je.Fault, "%v", err)
			assert.Equal(t, tc.offset, je.Offset, "%v", err)
			if tc.fault == JSONSyntax {
				assert.NoError(t, CheckStoredJSON([]byte(tc.doc)), "syntax is left to the decoder")
			} else {
				assert.Equal(t, err, CheckStoredJSON([]byte(tc.doc)))
			}
		})
	}
	assert.EqualError(t, CheckJSON([]byte(nested("[", "]", 33))), "nesting deeper than 32 levels at offset 32")
	assert.EqualError(t, CheckJSON([]byte(`"\u0000"`)), `a string at offset 1 contains a NUL character (\u0000), which cannot be stored`)
}

// A controller reads heartbeats with the same check: their results are
// stored. The agent's reading of replies is unchanged.
func TestDecodeHeartbeatBounds(t *testing.T) {
	hb := `{"agent_token":"t","agent_version":"1","boot_id":"b","fingerprint":"f","extra":{"k":%s}}`
	for name, tc := range map[string]struct{ value, want string }{
		"deep":          {`{"a":` + nested("[", "]", 31) + `}`, "malformed message: nesting deeper than 32 levels"},
		"NUL":           {`"a\u0000"`, "malformed message: a string at offset"},
		"invalid UTF-8": {"\"\xff\"", "is not valid UTF-8"},
		"surrogate":     {`"\udbff"`, "lone UTF-16 surrogate"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeHeartbeat(strings.NewReader(fmt.Sprintf(hb, tc.value)))
			assert.ErrorContains(t, err, tc.want)
		})
	}
	h, err := DecodeHeartbeat(strings.NewReader(fmt.Sprintf(hb, `"é \ud83d\ude00"`)))
	require.NoError(t, err)
	assert.Equal(t, "é 😀", h.Extra["k"])
	_, err = DecodeHeartbeat(strings.NewReader(`{"agent_token":`))
	assert.ErrorContains(t, err, "malformed message: unexpected EOF", "syntax errors read as before")

	_, err = DecodeHeartbeatResponse(strings.NewReader(`{"heartbeat_interval":5,"x":` + nested("[", "]", 40) + `}`))
	assert.NoError(t, err, "the agent reads what its controller sends")
}

func TestCleanString(t *testing.T) {
	for in, want := range map[string]string{
		"Dell Inc.":          "Dell Inc.",
		"ACME\x00\x00\x00":   "ACME",
		"A\x00B":             "AB",
		"caf\xe9":            "caf\uFFFD",
		"\xff\xfe":           "\uFFFD", // one replacement per run of bad bytes
		"Straße\x00\xc3":     "Straße\uFFFD",
		"":                   "",
		"\u00e9\U0001F600 ✓": "é😀 ✓",
	} {
		got := CleanString(in)
		assert.Equal(t, want, got, "%q", in)
		assert.True(t, utf8.ValidString(got))
		raw, err := json.Marshal(got)
		require.NoError(t, err)
		assert.NoError(t, CheckJSON(raw), "%q is storable", got)
	}
}

// FuzzCheckJSON: on any bytes the scanner never panics; what it accepts
// encoding/json accepts too, at most MaxJSONDepth deep, without NUL or
// invalid UTF-8; what encoding/json accepts it never calls a syntax
// error; and every other refusal is true at the offset it names.
func FuzzCheckJSON(f *testing.F) {
	for _, seed := range []string{`{"a":[1,2,{"b":null}]}`, `"\u0000"`, "\"\xff\"", `"\ud800"`, `"\ud800\udc00"`,
		nested("[", "]", 33), `{"a":-1.5e10,"b":true}`, ``, `[`, `{"\u00e9":"é"}`, "[\"\x00\"]", `"\ud800\u0041"`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if n, want := PlainLen(b), plainLenByByte(b); n != want || PlainLen(string(b)) != want {
			t.Fatalf("PlainLen(%q) = %d, byte by byte %d", b, n, want)
		}
		err := CheckJSON(b)
		valid := json.Valid(b)
		if err == nil {
			if !valid {
				t.Fatalf("accepted what encoding/json refuses: %q", b)
			}
			if !utf8.Valid(b) {
				t.Fatalf("accepted invalid UTF-8: %q", b)
			}
			if depth, nul := tokenWalk(t, b); depth > MaxJSONDepth || nul {
				t.Fatalf("accepted depth %d, NUL %v: %q", depth, nul, b)
			}
			return
		}
		var je *JSONError
		if !errors.As(err, &je) || je.Offset < 0 || je.Offset > len(b) {
			t.Fatalf("%q: error %T %v", b, err, err)
		}
		at := b[je.Offset:]
		switch je.Fault {
		case JSONSyntax:
			if valid {
				t.Fatalf("called valid JSON a syntax error: %q: %v", b, err)
			}
		case JSONTooDeep:
			if len(at) == 0 || (at[0] != '[' && at[0] != '{') {
				t.Fatalf("%q: too deep at %d, not an opening", b, je.Offset)
			}
		case JSONNUL:
			if !bytes.HasPrefix(at, []byte{0}) && !bytes.HasPrefix(at, []byte(`\u0000`)) {
				t.Fatalf("%q: no NUL at %d", b, je.Offset)
			}
		case JSONInvalidUTF8:
			if r, n := utf8.DecodeRune(at); r != utf8.RuneError || n != 1 {
				t.Fatalf("%q: valid UTF-8 at %d", b, je.Offset)
			}
		case JSONSurrogate:
			var r rune
			if _, err := fmt.Sscanf(string(at), `\u%4x`, &r); err != nil || r < 0xD800 || r > 0xDFFF {
				t.Fatalf("%q: no surrogate escape at %d", b, je.Offset)
			}
		default:
			t.Fatalf("%q: unknown fault %d", b, je.Fault)
		}
	})
}

func plainLenByByte(b []byte) int {
	for i, c := range b {
		if c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			return i
		}
	}
	return len(b)
}

// PlainLen stops at the first byte a JSON string escapes or that is not
// ASCII, wherever it falls in a word, and after the bytes that follow a
// borrow (a byte below 0x20) are never taken for a stop before it.
func TestPlainLen(t *testing.T) {
	base := []byte(strings.Repeat("abcdefgh", 4))
	for _, stop := range []byte{0, 0x1f, '"', '\\', 0x80, 0xff, 0xc3} {
		for at := range len(base) {
			b := bytes.Clone(base)
			b[at] = stop
			assert.Equal(t, at, PlainLen(b), "%#x at %d", stop, at)
			assert.Equal(t, at, PlainLen(string(b)), "%#x at %d", stop, at)
		}
	}
	assert.Equal(t, 32, PlainLen(base))
	assert.Equal(t, 0, PlainLen(""))
	assert.Equal(t, 3, PlainLen("\x7f !\x00"), "DEL and space are written as they are")
	assert.Equal(t, 9, PlainLen("\x20\x21\x7e~~~~~~\x01\x20\x20"), "a borrow does not hide the stop")
}

// tokenWalk is the reference the fuzzer compares with: encoding/json's
// token stream, its deepest nesting and whether a string holds a NUL.
func tokenWalk(t *testing.T, b []byte) (deepest int, nul bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // 1e700 is valid JSON, not a float64
	depth := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return deepest, nul
		}
		if err != nil {
			t.Fatalf("%q: encoding/json: %v", b, err)
		}
		switch x := tok.(type) {
		case json.Delim:
			if x == '{' || x == '[' {
				depth++
				deepest = max(deepest, depth)
			} else {
				depth--
			}
		case string:
			nul = nul || strings.Contains(x, "\x00")
		}
	}
}

// discoveryReport1MiB is a large machine's discovery report, about 1 MiB:
// many disks with partitions, NICs and PCI functions, some non-ASCII text.
func discoveryReport1MiB(tb testing.TB) []byte {
	inv := Inventory{CPU: CPU{ModelName: "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz", Count: 128, Architecture: "x86_64"},
		Memory:       Memory{Total: 1 << 40, PhysicalMB: 1 << 20},
		SystemVendor: SystemVendor{Manufacturer: "Fábrica Straße GmbH", ProductName: "Server ✓ 9000", SerialNumber: "SN-0001"},
		Boot:         BootInfo{CurrentBootMode: "uefi"}, FirmwareMissing: []string{"i915/tgl_dmc.bin", "rtl_nic/rtl8168h-2.fw"},
		Extra: map[string]any{"errors": []any{"memory: \"dmidecode\" not found", "tab\there"}}}
	for i := range 32 {
		inv.Interfaces = append(inv.Interfaces, NIC{Name: fmt.Sprintf("enp%ds0f%d", i/2, i%2), MACAddress: fmt.Sprintf("3c:ec:ef:12:%02x:%02x", i/256, i%256),
			HasCarrier: i%3 == 0, SpeedMbps: 25000, Driver: "ice"})
	}
	for i := range 64 {
		d := Disk{Name: fmt.Sprintf("/dev/sd%c%c", 'a'+i/26, 'a'+i%26), Size: 16 << 40, Model: "MZ7L37T6HBLA-00A07", Vendor: "ATA",
			Serial: fmt.Sprintf("S6EPNA0T%06d", i), WWN: "0x5002538f0000" + fmt.Sprint(i), Controller: "scsi", LogicalBlockSize: 512,
			PhysicalBlockSize: 4096, ByPath: fmt.Sprintf("/dev/disk/by-path/pci-0000:3b:00.0-sas-phy%d-lun-0", i)}
		for p := range 8 {
			d.Partitions = append(d.Partitions, Partition{Name: fmt.Sprintf("%s%d", d.Name, p+1), Size: 1 << 40, Holders: []string{"md127"}})
		}
		inv.Disks = append(inv.Disks, d)
	}
	for i := 0; ; i++ {
		inv.PCI = append(inv.PCI, PCIDevice{Address: fmt.Sprintf("0000:%02x:%02x.%d", i/256%256, i/8%32, i%8), Vendor: "8086", Device: "2922",
			Class: "010601", Driver: "ahci", Modules: []string{"ahci", "libahci"}})
		if i%64 == 0 {
			raw, err := json.Marshal(DiscoveryRequest{BootID: "6e8c5f2a-1b3d-4e5f-8a9b-0c1d2e3f4a5b", Inventory: inv})
			require.NoError(tb, err)
			if len(raw) >= 1<<20 {
				return raw
			}
		}
	}
}

// BenchmarkCheckJSONDiscoveryReport is the cost the body check adds to a
// 1 MiB discovery report (compare BenchmarkDecodeDiscoveryReport, the
// decoding it precedes).
func BenchmarkCheckJSONDiscoveryReport(b *testing.B) {
	raw := discoveryReport1MiB(b)
	require.NoError(b, CheckJSON(raw))
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if err := CheckJSON(raw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeDiscoveryReport(b *testing.B) {
	raw := discoveryReport1MiB(b)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		var req DiscoveryRequest
		if err := json.Unmarshal(raw, &req); err != nil {
			b.Fatal(err)
		}
	}
}

// The agent's encoded messages pass CheckJSON whatever strings the
// hardware gave it.
func TestWithoutNUL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"serial\x00\x00X", "serial\ufffd\ufffdX"},
		{`a literal \u0000 stays`, `a literal \u0000 stays`},
		{`\` + "\x00", `\` + "\ufffd"},
		{"plain", "plain"},
	} {
		b, err := json.Marshal(map[string]string{"k\x00": tc.in})
		require.NoError(t, err)
		out := WithoutNUL(b)
		require.NoError(t, CheckJSON(out), "%s", out)
		var got map[string]string
		require.NoError(t, json.Unmarshal(out, &got))
		assert.Equal(t, map[string]string{"k\ufffd": tc.want}, got)
	}
}
