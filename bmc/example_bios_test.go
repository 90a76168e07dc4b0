package bmc_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/anvil-metal/anvil/bmc"
)

// What a bios.apply_configuration step does: read, validate, skip a
// no-op, apply, reboot through the power path, read back and verify.
func ExampleManager_ApplyBIOS() {
	ctx := context.Background()
	m := bmc.New(bmc.Config{MinInterval: -1})
	t, err := bmc.ParseDriverInfo("fake-hardware", nil)
	if err != nil {
		panic(err)
	}
	t = t.WithID("node-1")
	// As decoded from the API's JSON body.
	requested := map[string]any{"BootMode": "Bios", "PxeDev1VlanId": 42.0, "QuietBoot": false}

	b, _, err := m.BIOS(ctx, t)
	if err != nil {
		panic(err)
	}
	if b.Registry != nil {
		if err := bmc.ValidateBIOS(*b.Registry, requested); err != nil {
			panic(err) // the API's 400
		}
	}
	changed := bmc.Diff(b.Current, requested)
	fmt.Println("to change:", len(changed)) // QuietBoot is already false
	if _, err := m.ApplyBIOS(ctx, t, changed); err != nil {
		panic(err)
	}
	if _, err := m.SetPower(ctx, t, bmc.ActionReboot); err != nil {
		panic(err)
	}
	after, _, err := m.BIOS(ctx, t)
	if err != nil {
		panic(err)
	}
	fmt.Println("verified:", bmc.VerifyApplied(requested, after.Current) == nil)

	err = bmc.ValidateBIOS(*b.Registry, map[string]any{"SystemServiceTag": "X", "BootMode": "Legacy"})
	fmt.Println(errors.Is(err, bmc.ErrInvalidBIOSSettings))
	fmt.Println(err)
	// Output:
	// to change: 2
	// verified: true
	// true
	// bmc: invalid BIOS settings: BootMode: "Legacy" is not one of Uefi, Bios; SystemServiceTag: read-only
}
