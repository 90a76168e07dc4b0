package bmc

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testRegistry() Registry {
	p := func(n int64) *int64 { return &n }
	attrs := []Attribute{
		{Name: "Mode", Type: AttrEnumeration, AllowableValues: []string{"Uefi", "Bios"}},
		{Name: "Vlan", Type: AttrInteger, LowerBound: p(1), UpperBound: p(4094)},
		{Name: "Delay", Type: AttrInteger, LowerBound: p(0), UpperBound: p(300), ScalarIncrement: p(15)},
		{Name: "Offset", Type: AttrInteger, LowerBound: p(-10), ScalarIncrement: p(5)},
		{Name: "Free", Type: AttrInteger},
		{Name: "Tag", Type: AttrString, MinLength: p(2), MaxLength: p(5), ValueExpression: `^[a-z]*$`},
		{Name: "Uri", Type: AttrString, ValueExpression: `(?<=x)y`}, // not RE2: left to the BMC
		{Name: "Pass", Type: AttrPassword, MaxLength: p(4)},
		{Name: "Quiet", Type: AttrBoolean},
		{Name: "ServiceTag", Type: AttrString, ReadOnly: true},
		{Name: "Frozen", Type: AttrEnumeration, Immutable: true, AllowableValues: []string{"A"}},
		{Name: "Odd", Type: "Blob"},
	}
	reg := Registry{ID: "Test.v1", Attributes: map[string]Attribute{}}
	for _, a := range attrs {
		reg.Attributes[a.Name] = a
	}
	return reg
}

func TestValidateBIOS(t *testing.T) {
	tests := []struct {
		name, attr string
		value      any
		reason     string // "" = valid
	}{
		{"enum ok", "Mode", "Bios", ""},
		{"enum not listed", "Mode", "Legacy", `"Legacy" is not one of Uefi, Bios`},
		{"enum case matters", "Mode", "uefi", "not one of"},
		{"enum wrong type", "Mode", 1, "wants a string, got an integer"},
		{"integer int", "Vlan", 42, ""},
		{"integer float64 from JSON", "Vlan", 42.0, ""},
		{"integer json.Number", "Vlan", json.Number("4094"), ""},
		{"integer int64 lower bound", "Vlan", int64(1), ""},
		{"integer below", "Vlan", 0, "0 is below the lower bound 1"},
		{"integer above", "Vlan", 4095, "4095 is above the upper bound 4094"},
		{"integer fraction", "Vlan", 4.5, "wants an integer, got a number with a fraction"},
		{"integer as string", "Vlan", "42", "wants an integer, got a string"},
		{"integer huge float", "Vlan", 1e300, "wants an integer, got an integer out of the 64-bit range"},
		{"integer NaN", "Vlan", math.NaN(), "wants an integer, got a number with a fraction"},
		{"integer huge json.Number", "Vlan", json.Number("99999999999999999999999"), "got an integer out of the 64-bit range"},
		{"integer uint64 overflow", "Free", uint64(math.MaxUint64), "wants an integer, got uint64"},
		{"integer null", "Vlan", nil, "wants an integer, got null"},
		{"increment on step", "Delay", 45, ""},
		{"increment off step", "Delay", 20, "20 is not a multiple of 15 from 0"},
		{"increment from negative lower bound", "Offset", -5, ""},
		{"increment off from negative lower bound", "Offset", -7, "not a multiple of 5 from -10"},
		{"increment with extreme value", "Offset", int64(math.MaxInt64), "not a multiple of 5"},
		{"unbounded integer", "Free", int64(math.MinInt64), ""},
		{"string ok", "Tag", "abc", ""},
		{"string too short", "Tag", "a", `"a" is shorter than 2 characters`},
		{"string too long", "Tag", "abcdef", "longer than 5"},
		{"string length in characters not bytes", "Tag", "ééééé", "does not match"},
		{"string off expression", "Tag", "AB", `"AB" does not match ^[a-z]*$`},
		{"string wrong type", "Tag", true, "wants a string, got a boolean"},
		{"string expression Go cannot compile", "Uri", "y", ""},
		{"password ok", "Pass", "s3cr", ""},
		{"password too long, not echoed", "Pass", "hunter2", "the password is longer than 4"},
		{"boolean ok", "Quiet", false, ""},
		{"boolean as string", "Quiet", "true", "wants a boolean, got a string"},
		{"read-only", "ServiceTag", "ABC", "read-only"},
		{"immutable", "Frozen", "A", "immutable"},
		{"unknown type", "Odd", "x", `attribute type "Blob" cannot be set`},
		{"unknown attribute", "Nope", "x", "unknown attribute (not in registry Test.v1)"},
		{"object value", "Tag", map[string]any{}, "got an object"},
	}
	reg := testRegistry()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateBIOS(reg, map[string]any{tc.attr: tc.value})
			if tc.reason == "" {
				require.NoError(t, err)
				return
			}
			var se *BIOSSettingsError
			require.ErrorAs(t, err, &se)
			require.ErrorIs(t, err, ErrInvalidBIOSSettings)
			require.Len(t, se.Problems, 1)
			assert.Equal(t, tc.attr, se.Problems[0].Name)
			assert.Contains(t, se.Problems[0].Reason, tc.reason)
			assert.NotContains(t, err.Error(), "hunter2")
		})
	}
}

func TestValidateBIOSNamesEveryProblem(t *testing.T) {
	err := ValidateBIOS(testRegistry(), map[string]any{"Vlan": 0, "Mode": "X", "Quiet": true, "Nope": 1})
	var se *BIOSSettingsError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, []BIOSProblem{
		{"Mode", `"X" is not one of Uefi, Bios`},
		{"Nope", "unknown attribute (not in registry Test.v1)"},
		{"Vlan", "0 is below the lower bound 1"},
	}, se.Problems)
	assert.Equal(t, `bmc: invalid BIOS settings: Mode: "X" is not one of Uefi, Bios; Nope: unknown attribute (not in registry Test.v1); Vlan: 0 is below the lower bound 1`, err.Error())
	assert.NoError(t, ValidateBIOS(testRegistry(), nil))
}

func TestDiff(t *testing.T) {
	current := map[string]any{"Mode": "Uefi", "Vlan": int64(1), "Quiet": false, "Pass": nil, "F": 1.5}
	assert.Empty(t, Diff(current, map[string]any{"Mode": "Uefi", "Vlan": 1.0, "Quiet": false, "F": 1.5}))
	assert.Equal(t, map[string]any{"Mode": "Bios", "Vlan": json.Number("2"), "Pass": "x", "New": "y"},
		Diff(current, map[string]any{"Mode": "Bios", "Vlan": json.Number("2"), "Quiet": false, "Pass": "x", "New": "y"}),
		"a changed value, a null (password) and an attribute current lacks")
	assert.Equal(t, map[string]any{"Quiet": "false"}, Diff(current, map[string]any{"Quiet": "false"}), "types matter")
	assert.Empty(t, Diff(nil, nil))
}

func TestVerifyApplied(t *testing.T) {
	read := map[string]any{"Mode": "Bios", "Vlan": int64(42), "Pass": nil, "Quiet": true}
	require.NoError(t, VerifyApplied(map[string]any{"Mode": "Bios", "Vlan": 42.0, "Pass": "x"}, read))
	err := VerifyApplied(map[string]any{"Mode": "Uefi", "Vlan": 7, "Quiet": true, "Gone": "x"}, read)
	require.ErrorIs(t, err, ErrVerify)
	assert.Equal(t, `bmc: verification failed: BIOS settings not applied: Gone: asked "x", not reported; `+
		`Mode: asked "Uefi", read back "Bios"; Vlan: asked 7, read back 42`, err.Error())
}

const vbmcLikeRegistry = `{"Id":"R.v1","RegistryEntries":{"Attributes":[
 {"AttributeName":"Mode","Type":"Enumeration","Value":[{"ValueName":"Uefi"},{"ValueName":"Bios"}],"DefaultValue":"Uefi","ResetRequired":true},
 {"AttributeName":"Vlan","Type":"Integer","LowerBound":1,"UpperBound":4094,"ScalarIncrement":1,"DefaultValue":1},
 {"AttributeName":"Tag","Type":"String","MinLength":0,"MaxLength":63,"ValueExpression":"^.*$","ReadOnly":true,"Immutable":true,"IsSystemUniqueProperty":true}
]}}`

func TestParseRegistry(t *testing.T) {
	reg, err := parseRegistry([]byte(vbmcLikeRegistry))
	require.NoError(t, err)
	assert.Equal(t, "R.v1", reg.ID)
	assert.Equal(t, []string{"Uefi", "Bios"}, reg.Attributes["Mode"].AllowableValues)
	assert.Equal(t, int64(1), reg.Attributes["Vlan"].Default)
	assert.Equal(t, int64(4094), *reg.Attributes["Vlan"].UpperBound)
	tag := reg.Attributes["Tag"]
	assert.True(t, tag.ReadOnly && tag.Immutable && tag.Unique)
	assert.Nil(t, tag.LowerBound)

	for name, doc := range map[string]string{
		"not JSON":           `{`,
		"not an object":      `[1]`,
		"no entries":         `{"Id":"x"}`,
		"attributes object":  `{"RegistryEntries":{"Attributes":{}}}`,
		"entry not object":   `{"RegistryEntries":{"Attributes":[1]}}`,
		"no name":            `{"RegistryEntries":{"Attributes":[{"Type":"String"}]}}`,
		"no type":            `{"RegistryEntries":{"Attributes":[{"AttributeName":"A"}]}}`,
		"bound is string":    `{"RegistryEntries":{"Attributes":[{"AttributeName":"A","Type":"Integer","LowerBound":"1"}]}}`,
		"bound too big":      `{"RegistryEntries":{"Attributes":[{"AttributeName":"A","Type":"Integer","UpperBound":1e40}]}}`,
		"bound fraction":     `{"RegistryEntries":{"Attributes":[{"AttributeName":"A","Type":"Integer","UpperBound":1.5}]}}`,
		"negative increment": `{"RegistryEntries":{"Attributes":[{"AttributeName":"A","Type":"Integer","ScalarIncrement":-1}]}}`,
		"flag is string":     `{"RegistryEntries":{"Attributes":[{"AttributeName":"A","Type":"Integer","ReadOnly":"yes"}]}}`,
		"value not list":     `{"RegistryEntries":{"Attributes":[{"AttributeName":"A","Type":"Enumeration","Value":"x"}]}}`,
		"value without name": `{"RegistryEntries":{"Attributes":[{"AttributeName":"A","Type":"Enumeration","Value":[{"ValueDisplayName":"x"}]}]}}`,
	} {
		_, err := parseRegistry([]byte(doc))
		assert.Error(t, err, name)
	}
}

func TestParseBiosDoc(t *testing.T) {
	d, err := parseBiosDoc([]byte(`{"AttributeRegistry":"R","Attributes":{"A":1,"B":"x","C":null,"D":1.5,"E":123456789012345678901234567890},
	 "@Redfish.Settings":{"SettingsObject":{"@odata.id":"/S"},"SupportedApplyTimes":["OnReset",3]},
	 "Actions":{"#Bios.ResetBios":{"target":"/R"}}}`))
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"A": int64(1), "B": "x", "C": nil, "D": 1.5, "E": 1.2345678901234568e+29}, d.attrs)
	assert.Equal(t, "/S", d.settingsURI)
	assert.Equal(t, []string{"OnReset"}, d.applyTimes)
	assert.Equal(t, "/R", d.resetTarget)

	d, err = parseBiosDoc([]byte(`{"Id":"Settings"}`))
	require.NoError(t, err)
	assert.Empty(t, d.attrs)
	_, err = parseBiosDoc([]byte(`{"Attributes":[1]}`))
	assert.Error(t, err)
	_, err = parseBiosDoc([]byte(`"x"`))
	assert.Error(t, err)
}

func TestRegistryLocation(t *testing.T) {
	for doc, want := range map[string]string{
		`{"Location":[{"Language":"ja","Uri":"/ja"},{"Language":"en","Uri":"/en"}]}`:        "/en",
		`{"Location":[{"Language":"ja","Uri":"/ja"}]}`:                                      "/ja",
		`{"Location":[{"Language":"en","PublicationUri":"/pub"}]}`:                          "/pub",
		`{"Location":[{"Language":"en","PublicationUri":"https://vendor.example/r.json"}]}`: "",
		`{"Location":[{"Language":"en","ArchiveUri":"/r.zip"}]}`:                            "",
		`{"Location":"x"}`: "",
		`{"Location":[{"Language":"en","Uri":"/en","PublicationUri":"https://vendor.example/r.json"}, 7]}`: "/en",
	} {
		got, err := registryLocation([]byte(doc))
		if want == "" {
			assert.Error(t, err, doc)
			continue
		}
		require.NoError(t, err, doc)
		assert.Equal(t, want, got, doc)
	}
}

// FuzzBIOSDocuments feeds odd BMC answers to every decoder written here:
// they may fail, never panic, and what they accept must be usable.
func FuzzBIOSDocuments(f *testing.F) {
	for _, s := range []string{
		vbmcLikeRegistry, `{}`, `null`, `[]`, `{"Attributes":null}`, `{"Attributes":{"A":{"B":[1,2]}}}`,
		`{"RegistryEntries":{"Attributes":[{"AttributeName":"A","Type":"Integer","LowerBound":-9223372036854775808,"UpperBound":9223372036854775807,"ScalarIncrement":9223372036854775807}]}}`,
		`{"RegistryEntries":{"Attributes":[{"AttributeName":"A","Type":"String","ValueExpression":"(","MaxLength":0}]}}`,
		`{"RegistryEntries":{"Attributes":[{"AttributeName":"A","Type":"Integer","ScalarIncrement":0,"DefaultValue":1e999}]}}`,
		`{"Location":[{"Uri":5},{"PublicationUri":"/x"}]}`, `{"@Redfish.Settings":{"SupportedApplyTimes":"OnReset"}}`,
		`{"Attributes":{"A":1e400}}`, strings.Repeat(`[`, 1000),
	} {
		f.Add([]byte(s))
	}
	values := []any{nil, "", "Uefi", int64(math.MinInt64), int64(math.MaxInt64), 0, 15, -1.5, true, json.Number("1e3")}
	f.Fuzz(func(t *testing.T, doc []byte) {
		if reg, err := parseRegistry(doc); err == nil {
			for name := range reg.Attributes {
				for _, v := range values {
					err := ValidateBIOS(*reg, map[string]any{name: v})
					var se *BIOSSettingsError
					if err != nil && !errors.As(err, &se) {
						t.Fatalf("ValidateBIOS: %v is not a *BIOSSettingsError", err)
					}
				}
			}
		}
		if d, err := parseBiosDoc(doc); err == nil {
			_ = Diff(d.attrs, d.attrs)
			if err := VerifyApplied(d.attrs, d.attrs); err != nil {
				t.Fatalf("a document does not verify against itself: %v", err)
			}
		}
		_, _ = registryLocation(doc)
	})
}
