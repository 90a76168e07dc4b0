package agent

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseCmdlineNetwork(t *testing.T) {
	gw := netip.MustParseAddr("192.0.2.1")
	tests := []struct {
		name     string
		cmdline  string
		static   *StaticIP
		vlan     *VLAN
		bootif   string
		problems int
	}{
		{"Ironic's ip= form with BOOTIF", "ip=192.0.2.10:192.0.2.5:192.0.2.1:255.255.255.0 BOOTIF=01-52-54-00-AB-CD-EF",
			&StaticIP{Address: netip.MustParsePrefix("192.0.2.10/24"), Gateway: gw}, nil, "52:54:00:ab:cd:ef", 0},
		{"kernel ip= with device and DNS", "ip=10.1.2.3::10.1.0.1:255.255.0.0:node1:eno2:off:10.1.0.53:10.1.0.54",
			&StaticIP{Address: netip.MustParsePrefix("10.1.2.3/16"), Gateway: netip.MustParseAddr("10.1.0.1"), Device: "eno2",
				DNS: []netip.Addr{netip.MustParseAddr("10.1.0.53"), netip.MustParseAddr("10.1.0.54")}}, nil, "", 0},
		{"ip=dhcp is DHCP", "ip=dhcp", nil, nil, "", 0},
		{"anvil.ip= wins over ip=, in any order", "anvil.ip=198.51.100.7/25,198.51.100.1,3c:ec:ef:12:34:57 ip=192.0.2.10::192.0.2.1:255.255.255.0",
			&StaticIP{Address: netip.MustParsePrefix("198.51.100.7/25"), Gateway: netip.MustParseAddr("198.51.100.1"), Device: "3c:ec:ef:12:34:57"}, nil, "", 0},
		{"anvil.ip= without gateway", "anvil.ip=198.51.100.7/25", &StaticIP{Address: netip.MustParsePrefix("198.51.100.7/25")}, nil, "", 0},
		{"VLAN", "anvil.vlan=100", nil, &VLAN{ID: 100}, "", 0},
		{"VLAN on one port", "anvil.vlan=4094,eno2", nil, &VLAN{ID: 4094, Device: "eno2"}, "", 0},
		{"bad values are problems, not a crash", "ip=nonsense anvil.ip=10.0.0.1 anvil.vlan=5000 ip=1.2.3.4::1.2.3.1:255.0.255.0", nil, nil, "", 4},
		{"IPv6 is not ours to configure", "anvil.ip=2001:db8::5/64", nil, nil, "", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ParseCmdline(tt.cmdline)
			assert.Equal(t, tt.static, c.Static)
			assert.Equal(t, tt.vlan, c.VLAN)
			assert.Equal(t, tt.bootif, c.BootIF)
			assert.Len(t, c.Problems, tt.problems, "%v", c.Problems)
		})
	}
}

// fakeSetup records what Interfaces asks of the kernel.
type fakeSetup struct {
	carrier string // what FirstCarrier answers
	calls   []string
	failOn  string
}

func (f *fakeSetup) AddVLAN(parent string, id int) (string, error) {
	f.calls = append(f.calls, fmt.Sprintf("vlan %s %d", parent, id))
	if parent == f.failOn {
		return "", fmt.Errorf("no such device %s", parent)
	}
	return fmt.Sprintf("%s.%d", parent, id), nil
}

func (f *fakeSetup) AddBond(name, mode string, members []string) (string, error) {
	f.calls = append(f.calls, fmt.Sprintf("bond %s %s %v", name, mode, members))
	return name, nil
}

func (f *fakeSetup) FirstCarrier(_ context.Context, names []string) (string, error) {
	f.calls = append(f.calls, fmt.Sprintf("carrier %v", names))
	if f.carrier == "" {
		return "", fmt.Errorf("no carrier")
	}
	return f.carrier, nil
}

func (f *fakeSetup) Static(_ context.Context, name string, s StaticIP) error {
	f.calls = append(f.calls, fmt.Sprintf("static %s %s", name, s.Address))
	return nil
}

func TestInterfacesStaticAndVLAN(t *testing.T) {
	eno1 := Link{Name: "eno1", MAC: "3c:ec:ef:12:34:56", Physical: true}
	eno2 := Link{Name: "eno2", MAC: "3c:ec:ef:12:34:57", Physical: true, Carrier: true}
	addr := &StaticIP{Address: netip.MustParsePrefix("192.0.2.10/24")}
	withDev := func(dev string) *StaticIP { s := *addr; s.Device = dev; return &s }
	tests := []struct {
		name      string
		static    *StaticIP
		vlan      *VLAN
		bootif    string
		setup     *fakeSetup
		dhcp      *fakeDHCP
		wantCalls []string
		wantAsked [][]string
		wantErr   bool
	}{
		{"static on the first port with a carrier", addr, nil, "", &fakeSetup{carrier: "eno2"}, nil,
			[]string{"carrier [eno1 eno2]", "static eno2 192.0.2.10/24"}, nil, false},
		{"static on BOOTIF's port", addr, nil, "3c:ec:ef:12:34:56", &fakeSetup{}, nil, []string{"static eno1 192.0.2.10/24"}, nil, false},
		{"static on the named port, by MAC", withDev("3C:EC:EF:12:34:57"), nil, "", &fakeSetup{}, nil, []string{"static eno2 192.0.2.10/24"}, nil, false},
		{"static on a port that is not there", withDev("eth7"), nil, "", &fakeSetup{}, nil, nil, nil, true},
		{"no carrier anywhere", addr, nil, "", &fakeSetup{}, nil, []string{"carrier [eno1 eno2]"}, nil, true},
		{"static on a VLAN", addr, &VLAN{ID: 100}, "", &fakeSetup{carrier: "eno2"}, nil,
			[]string{"carrier [eno1 eno2]", "vlan eno2 100", "static eno2.100 192.0.2.10/24"}, nil, false},
		{"DHCP on a VLAN on every port, one failing", nil, &VLAN{ID: 7}, "", &fakeSetup{failOn: "eno1"}, &fakeDHCP{leases: []string{"eno2.7"}},
			[]string{"vlan eno1 7", "vlan eno2 7"}, [][]string{{"eno2.7"}}, false},
		{"DHCP on a VLAN on one port", nil, &VLAN{ID: 7, Device: "eno1"}, "", &fakeSetup{}, &fakeDHCP{leases: []string{"eno1.7"}},
			[]string{"vlan eno1 7"}, [][]string{{"eno1.7"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &Interfaces{Links: fakeLinks{eno1, eno2}, Setup: tt.setup, Static: tt.static, VLAN: tt.vlan, BootIF: tt.bootif}
			if tt.dhcp != nil {
				n.DHCP = tt.dhcp
			}
			macs, err := n.Up(context.Background())
			if tt.wantErr {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
				assert.Equal(t, []string{eno1.MAC, eno2.MAC}, macs, "lookup sends every MAC")
			}
			assert.Equal(t, tt.wantCalls, tt.setup.calls)
			if tt.dhcp != nil {
				assert.Equal(t, tt.wantAsked, tt.dhcp.asked)
			}
		})
	}
}

// TestFirstToSucceed: the first interface to succeed wins without waiting
// for a slow one; with none, every failure is kept; an ended context ends
// the wait.
func TestFirstToSucceed(t *testing.T) {
	slow := make(chan struct{})
	defer close(slow)
	first, errs, err := firstToSucceed(context.Background(), []string{"eth0", "eth1", "eth2"}, func(n string) error {
		switch n {
		case "eth0":
			<-slow
			return nil
		case "eth1":
			return fmt.Errorf("%s: no carrier", n)
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, "eth2", first)
	assert.LessOrEqual(t, len(errs), 1, "at most eth1's failure came first")

	first, errs, err = firstToSucceed(context.Background(), []string{"eth0", "eth1"}, func(n string) error { return fmt.Errorf("%s: down", n) })
	require.NoError(t, err)
	assert.Empty(t, first)
	assert.Len(t, errs, 2)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err = firstToSucceed(ctx, []string{"eth0"}, func(string) error { <-slow; return nil })
	assert.ErrorIs(t, err, context.Canceled)
}
