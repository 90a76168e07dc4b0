package vbmc

import (
	"crypto/sha1"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// The BIOS attribute registry, shaped like Dell iDRAC's
// BiosAttributeRegistry (attribute names, menus, bounds), with a few
// Boolean attributes as Supermicro and Lenovo have them, so that clients
// meet every Redfish attribute type.

// BiosRegistryID is the registry's id, as Bios.AttributeRegistry names it.
const BiosRegistryID = "BiosAttributeRegistry.v1_0_0"

// Redfish attribute types.
const (
	AttrEnumeration = "Enumeration"
	AttrString      = "String"
	AttrInteger     = "Integer"
	AttrBoolean     = "Boolean"
	AttrPassword    = "Password"
)

// biosVersion is what SystemBiosVersion reads.
const biosVersion = "2.19.1"

// biosAttr is one registry entry.
type biosAttr struct {
	Name, Display, Type, Menu, Help string
	ReadOnly, Immutable             bool
	ResetRequired                   bool
	Values                          []string // Enumeration
	Lower, Upper, Incr              int64    // Integer
	MinLen, MaxLen                  int64    // String, Password
	Expr                            string   // String, Password: a regular expression
	// Default is the value after ResetBios. nil for read-only facts of the
	// node (service tag), which the registry cannot know.
	Default any
}

func enabledDisabled() []string { return []string{"Enabled", "Disabled"} }

// biosRegistry returns the attribute table, in display order.
func biosRegistry() []biosAttr {
	const (
		info  = "./SysInformationRef"
		mem   = "./MemSettingsRef"
		proc  = "./ProcSettingsRef"
		boot  = "./BootSettingsRef"
		netw  = "./NetworkSettingsRef"
		integ = "./IntegratedDevicesRef"
		ser   = "./SerialCommSettingsRef"
		prof  = "./SysProfileSettingsRef"
		sec   = "./SysSecurityRef"
		misc  = "./MiscSettingsRef"
	)
	ro := func(name, display string, maxLen int64) biosAttr {
		return biosAttr{Name: name, Display: display, Type: AttrString, Menu: info, ReadOnly: true, Immutable: true, ResetRequired: true, MaxLen: maxLen}
	}
	en := func(name, display, menu string, reset bool, def string, values ...string) biosAttr {
		return biosAttr{Name: name, Display: display, Type: AttrEnumeration, Menu: menu, ResetRequired: reset, Values: values, Default: def}
	}
	return []biosAttr{
		ro("SystemModelName", "System Model Name", 40),
		ro("SystemManufacturer", "System Manufacturer", 40),
		ro("SystemBiosVersion", "System BIOS Version", 40),
		ro("SystemServiceTag", "System Service Tag", 7),
		ro("SystemCpldVersion", "System CPLD Version", 40),
		ro("UefiComplianceVersion", "UEFI Compliance Version", 40),
		{Name: "SysMemSize", Display: "System Memory Size", Type: AttrString, Menu: mem, ReadOnly: true, Immutable: true, ResetRequired: true, MaxLen: 20},
		en("MemTest", "System Memory Testing", mem, true, "Disabled", enabledDisabled()...),
		en("NodeInterleave", "Node Interleaving", mem, true, "Disabled", enabledDisabled()...),
		en("LogicalProc", "Logical Processor", proc, true, "Enabled", enabledDisabled()...),
		en("ProcVirtualization", "Virtualization Technology", proc, true, "Enabled", enabledDisabled()...),
		en("ProcTurboMode", "Turbo Boost", proc, true, "Enabled", enabledDisabled()...),
		en("ProcCStates", "C States", proc, true, "Enabled", enabledDisabled()...),
		{Name: "Proc1Brand", Display: "Processor 1 Brand", Type: AttrString, Menu: proc, ReadOnly: true, Immutable: true, ResetRequired: true, MaxLen: 48},
		en("BootMode", "Boot Mode", boot, true, "Uefi", "Uefi", "Bios"),
		en("BootSeqRetry", "Boot Sequence Retry", boot, true, "Enabled", enabledDisabled()...),
		en("SetBootOrderEn", "Hard-Disk Failover", boot, true, "Disabled", enabledDisabled()...),
		{Name: "QuietBoot", Display: "Quiet Boot", Type: AttrBoolean, Menu: boot, ResetRequired: true, Default: false},
		{Name: "HttpDev1Uri", Display: "HTTP Device 1 URI", Type: AttrString, Menu: netw, ResetRequired: true, MaxLen: 2048, Expr: `^$|^https?://\S+$`, Default: ""},
		en("PxeDev1EnDis", "PXE Device 1", netw, true, "Enabled", enabledDisabled()...),
		en("PxeDev1Protocol", "PXE Device 1 Protocol", netw, true, "IPv4", "IPv4", "IPv6"),
		en("PxeDev1VlanEnDis", "PXE Device 1 VLAN", netw, true, "Disabled", enabledDisabled()...),
		{Name: "PxeDev1VlanId", Display: "PXE Device 1 VLAN ID", Type: AttrInteger, Menu: netw, ResetRequired: true, Lower: 1, Upper: 4094, Incr: 1, Default: int64(1)},
		{Name: "PxeDev1VlanPriority", Display: "PXE Device 1 VLAN Priority", Type: AttrInteger, Menu: netw, ResetRequired: true, Lower: 0, Upper: 7, Incr: 1, Default: int64(0)},
		{Name: "WakeOnLan", Display: "Wake on LAN", Type: AttrBoolean, Menu: netw, ResetRequired: false, Default: true},
		en("SriovGlobalEnable", "SR-IOV Global Enable", integ, true, "Disabled", enabledDisabled()...),
		en("EmbSata", "Embedded SATA", integ, true, "AhciMode", "AhciMode", "RaidMode", "Off"),
		en("UsbPorts", "User Accessible USB Ports", integ, true, "AllOn", "AllOn", "OnlyBackPortsOn", "AllOff"),
		en("OsWatchdogTimer", "OS Watchdog Timer", integ, true, "Disabled", enabledDisabled()...),
		en("SerialComm", "Serial Communication", ser, true, "OnNoConRedir", "OnNoConRedir", "OnConRedirCom1", "OnConRedirCom2", "Off"),
		en("SerialPortAddress", "Serial Port Address", ser, true, "Serial1Com1Serial2Com2", "Serial1Com1Serial2Com2", "Serial1Com2Serial2Com1"),
		en("FailSafeBaud", "Failsafe Baud Rate", ser, true, "115200", "115200", "57600", "19200", "9600"),
		en("ConTermType", "Remote Terminal Type", ser, true, "Vt100Vt220", "Vt100Vt220", "Ansi"),
		en("RedirAfterBoot", "Redirection After Boot", ser, true, "Enabled", enabledDisabled()...),
		en("SysProfile", "System Profile", prof, true, "PerfPerWattOptimizedDapc", "PerfPerWattOptimizedDapc", "PerfPerWattOptimizedOs", "PerfOptimized", "Custom"),
		en("SecureBoot", "Secure Boot", sec, true, "Disabled", enabledDisabled()...),
		en("TpmSecurity", "TPM Security", sec, true, "On", "On", "Off"),
		{Name: "TpmPresent", Display: "TPM Present", Type: AttrBoolean, Menu: sec, ReadOnly: true, ResetRequired: true, Default: true},
		{Name: "SetupPassword", Display: "Setup Password", Type: AttrPassword, Menu: sec, ResetRequired: false, MinLen: 0, MaxLen: 32, Expr: `^[ -~]*$`},
		{Name: "SysPassword", Display: "System Password", Type: AttrPassword, Menu: sec, ResetRequired: false, MinLen: 0, MaxLen: 32, Expr: `^[ -~]*$`},
		en("AcPwrRcvry", "AC Power Recovery", sec, false, "Last", "On", "Off", "Last"),
		en("AcPwrRcvryDelay", "AC Power Recovery Delay", sec, false, "Immediate", "Immediate", "Random", "User"),
		{Name: "AcPwrRcvryUserDelay", Display: "User Defined Delay (60s to 600s)", Type: AttrInteger, Menu: sec, ResetRequired: false, Lower: 60, Upper: 600, Incr: 1, Default: int64(60)},
		{Name: "PowerCycleDelaySecs", Display: "Power Cycle Delay", Type: AttrInteger, Menu: sec, ResetRequired: true, Lower: 0, Upper: 300, Incr: 15, Default: int64(0)},
		{Name: "AssetTag", Display: "Asset Tag", Type: AttrString, Menu: misc, ResetRequired: false, MinLen: 0, MaxLen: 63, Expr: `^[ -~]*$`, Default: ""},
		en("NumLock", "Keyboard NumLock", misc, false, "On", "On", "Off"),
		en("ErrPrompt", "F1/F2 Prompt on Error", misc, false, "Enabled", enabledDisabled()...),
		en("InBandManageabilityInterface", "In-Band Manageability Interface", misc, true, "Enabled", enabledDisabled()...),
	}
}

// biosMenus are the registry's menus (Dell's names).
func biosMenus() []map[string]any {
	names := [][2]string{
		{"SysInformationRef", "System Information"}, {"MemSettingsRef", "Memory Settings"},
		{"ProcSettingsRef", "Processor Settings"}, {"BootSettingsRef", "Boot Settings"},
		{"NetworkSettingsRef", "Network Settings"}, {"IntegratedDevicesRef", "Integrated Devices"},
		{"SerialCommSettingsRef", "Serial Communication"}, {"SysProfileSettingsRef", "System Profile Settings"},
		{"SysSecurityRef", "System Security"}, {"MiscSettingsRef", "Miscellaneous Settings"},
	}
	menus := make([]map[string]any, 0, len(names))
	for i, m := range names {
		menus = append(menus, map[string]any{"MenuName": m[0], "DisplayName": m[1], "DisplayOrder": i + 1,
			"MenuPath": "./" + m[0], "GrayOut": false, "Hidden": false, "ReadOnly": false})
	}
	return menus
}

// writable reports whether a client may set the attribute.
func (a biosAttr) writable() bool { return !a.ReadOnly && !a.Immutable }

// registryEntry is the attribute as the registry document shows it: only
// the properties of its type, as real registries do.
func (a biosAttr) registryEntry(order int) map[string]any {
	e := map[string]any{
		"AttributeName": a.Name, "DisplayName": a.Display, "Type": a.Type,
		"DisplayOrder": order, "MenuPath": a.Menu, "HelpText": a.Display + ".",
		"ReadOnly": a.ReadOnly, "Immutable": a.Immutable, "ResetRequired": a.ResetRequired,
		"Hidden": false, "GrayOut": false, "WriteOnly": a.Type == AttrPassword,
	}
	if a.Default != nil {
		e["DefaultValue"] = a.Default
	}
	switch a.Type {
	case AttrEnumeration:
		vals := make([]map[string]any, 0, len(a.Values))
		for _, v := range a.Values {
			vals = append(vals, map[string]any{"ValueName": v, "ValueDisplayName": v})
		}
		e["Value"] = vals
	case AttrInteger:
		e["LowerBound"], e["UpperBound"], e["ScalarIncrement"] = a.Lower, a.Upper, a.Incr
	case AttrString, AttrPassword:
		e["MinLength"], e["MaxLength"] = a.MinLen, a.MaxLen
		if a.Expr != "" {
			e["ValueExpression"] = a.Expr
		}
	}
	return e
}

// biosRegistryDocument is the AttributeRegistry resource at path.
func biosRegistryDocument(path string) map[string]any {
	reg := biosRegistry()
	attrs := make([]map[string]any, 0, len(reg))
	for i, a := range reg {
		attrs = append(attrs, a.registryEntry(100+i))
	}
	doc := odata(path, "#AttributeRegistry.v1_3_0.AttributeRegistry")
	doc["Id"] = BiosRegistryID
	doc["Name"] = "BIOS Attribute Registry"
	doc["Description"] = "This registry defines a representation of BIOS Attribute instances"
	doc["Language"] = "en"
	doc["OwningEntity"] = "anvil"
	doc["RegistryVersion"] = "1.0.0"
	doc["SupportedSystems"] = []any{map[string]any{"ProductName": "anvil-vbmc virtual node", "SystemId": "AnvilVirtual", "FirmwareVersion": biosVersion}}
	doc["RegistryEntries"] = map[string]any{"Attributes": attrs, "Menus": biosMenus(), "Dependencies": []any{}}
	return doc
}

// serviceTag is the node's 7-character service tag, stable per name.
func serviceTag(name string) string {
	const alphabet = "0123456789BCDFGHJKLMNPQRSTVWXYZ"
	sum := sha1.Sum([]byte("anvil-vbmc service tag " + name))
	var b strings.Builder
	for _, c := range sum[:7] {
		b.WriteByte(alphabet[int(c)%len(alphabet)])
	}
	return b.String()
}

// biosDefaults returns the attribute values of a node fresh from the
// factory: registry defaults plus the node's read-only facts.
func biosDefaults(nodeName string) map[string]any {
	facts := map[string]any{
		"SystemModelName": "anvil-vbmc virtual node", "SystemManufacturer": "anvil",
		"SystemBiosVersion": biosVersion, "SystemServiceTag": serviceTag(nodeName),
		"SystemCpldVersion": "1.0.9", "UefiComplianceVersion": "2.7",
		"SysMemSize": "2.0 GB", "Proc1Brand": "QEMU Virtual CPU version 2.5+",
	}
	vals := map[string]any{}
	for _, a := range biosRegistry() {
		switch {
		case a.Type == AttrPassword:
			vals[a.Name] = ""
		case a.Default != nil:
			vals[a.Name] = a.Default
		default:
			vals[a.Name] = facts[a.Name]
		}
	}
	return vals
}

// attrError is one rejected attribute of a Settings PATCH, as a Redfish
// message.
type attrError struct {
	id, attr, msg string
	args          []any
}

func (e attrError) message() map[string]any {
	return map[string]any{
		"@odata.type":       "#Message.v1_1_1.Message",
		"MessageId":         "Base.1.8." + e.id,
		"Message":           e.msg,
		"MessageArgs":       e.args,
		"RelatedProperties": []string{"#/Attributes/" + e.attr},
		"Severity":          "Warning",
		"Resolution":        "Correct the value of the attribute and resubmit the request.",
	}
}

// validate checks raw, a value from a PATCH body decoded with UseNumber,
// against the attribute and returns it as stored (string, int64, bool).
func (a biosAttr) validate(raw any) (any, *attrError) {
	show := fmt.Sprint(raw)
	if a.Type == AttrPassword {
		show = "******" // never echo a password, not even a wrong one
	}
	typeErr := &attrError{id: "PropertyValueTypeError", attr: a.Name, args: []any{show, a.Name},
		msg: fmt.Sprintf("The value %s for the property %s is of a different type than the property can accept.", show, a.Name)}
	switch a.Type {
	case AttrBoolean:
		b, ok := raw.(bool)
		if !ok {
			return nil, typeErr
		}
		return b, nil
	case AttrInteger:
		num, ok := raw.(json.Number)
		if !ok {
			return nil, typeErr
		}
		v, err := num.Int64()
		if err != nil {
			return nil, typeErr
		}
		if v < a.Lower || v > a.Upper || (a.Incr > 1 && (v-a.Lower)%a.Incr != 0) {
			return nil, &attrError{id: "PropertyValueOutOfRange", attr: a.Name, args: []any{show, a.Name},
				msg: fmt.Sprintf("The value %s for the property %s is not in the supported range (%d to %d, step %d).", show, a.Name, a.Lower, a.Upper, max(a.Incr, 1))}
		}
		return v, nil
	}
	s, ok := raw.(string)
	if !ok {
		return nil, typeErr
	}
	if a.Type == AttrEnumeration {
		for _, v := range a.Values {
			if v == s {
				return s, nil
			}
		}
		return nil, &attrError{id: "PropertyValueNotInList", attr: a.Name, args: []any{s, a.Name},
			msg: fmt.Sprintf("The value %s for the property %s is not in the list of acceptable values.", s, a.Name)}
	}
	n := int64(len([]rune(s)))
	bad := n < a.MinLen || n > a.MaxLen
	if !bad && a.Expr != "" {
		bad = !regexp.MustCompile(a.Expr).MatchString(s)
	}
	if bad {
		return nil, &attrError{id: "PropertyValueFormatError", attr: a.Name, args: []any{show, a.Name},
			msg: fmt.Sprintf("The value %s for the property %s is of a different format than the property can accept (length %d to %d).", show, a.Name, a.MinLen, a.MaxLen)}
	}
	return s, nil
}
