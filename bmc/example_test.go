package bmc_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/anvil-metal/anvil/bmc"
)

// The controller's view: validate driver_info once, then run verified
// operations. fake-hardware keeps state in the Manager, so this runs
// anywhere.
func Example() {
	ctx := context.Background()
	m := bmc.New(bmc.Config{MinInterval: -1})

	t, err := bmc.ParseDriverInfo("fake-hardware", map[string]any{})
	if err != nil {
		panic(err)
	}
	t = t.WithID("8b2f7c5e-node-uuid")

	if _, err := m.SetBootDevice(ctx, t, bmc.BootPXE, bmc.BootOptions{}); err != nil {
		panic(err)
	}
	out, err := m.SetPower(ctx, t, bmc.ActionOn)
	if err != nil {
		panic(err)
	}
	st, _, _ := m.PowerState(ctx, t)
	fmt.Println(st, "via", out.Provider)

	// Failures carry sentinels the controller can act on.
	m.Fake().SetKnobs("8b2f7c5e-node-uuid", bmc.FakeKnobs{FailAuth: true})
	_, err = m.SetPower(ctx, t, bmc.ActionOff)
	fmt.Println(errors.Is(err, bmc.ErrAuth))
	// Output:
	// power on via fake
	// true
}

func ExampleParseDriverInfo() {
	_, err := bmc.ParseDriverInfo("ipmi", map[string]any{"ipmi_port": "six-two-three", "ipmi_password": "secret"})
	fmt.Println(err)
	// Output:
	// bmc: invalid driver_info for hardware type ipmi: ipmi_address: required; ipmi_port: "six-two-three" is not a port number (1-65535)
}

func ExampleMaskDriverInfo() {
	fmt.Println(bmc.MaskDriverInfo(map[string]any{"redfish_address": "https://10.0.0.9", "redfish_password": "calvin"}))
	// Output:
	// map[redfish_address:https://10.0.0.9 redfish_password:******]
}
