// Package ipmisim runs OpenIPMI's ipmi_sim for tests: a real IPMI-over-LAN
// BMC on a free 127.0.0.1 UDP port whose chassis power and boot device are
// handled by anvil-vbmc's chassis-control program.
package ipmisim

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"text/template"
	"time"
)

// Options configure Start.
type Options struct {
	// ChassisControl is the program ipmi_sim runs as
	// "<ChassisControl> 0x20 get|set <param> [value]", e.g.
	// "/tmp/anvil-vbmc chassis-control --url http://127.0.0.1:8000/control/node-1".
	ChassisControl string
	// Username and Password of the IPMI admin user (default admin/password).
	Username, Password string
	// Users are further IPMI users (numbers 3 and up).
	Users []User
	// SOL, when set, is the serial device ipmi_sim bridges to its
	// Serial-over-LAN payload: "tcp:127.0.0.1:PORT" for a QEMU
	// "-chardev socket,server=on" serial port (ipmi_sim connects when a
	// client activates SOL), or a path to a tty.
	SOL string
	// Addr and Port are where the LAN interface listens: default
	// 127.0.0.1 and a free port. A fixed Port is not retried elsewhere.
	Addr string
	Port int
	// LAN is what the BMC reports as its LAN configuration (Get LAN
	// Configuration Parameters, from the LAN or in band); zero: nothing
	// (0.0.0.0, as ipmi_sim without a lan_config_program).
	LAN LANConfig
	// KCSPort, when set, has ipmi_sim listen on 127.0.0.1:KCSPort for
	// QEMU's ipmi-bmc-extern (the "VM" protocol), so the guest has an
	// in-band KCS interface to this BMC.
	KCSPort int
}

// LANConfig is the address and MAC the BMC reports for its LAN channel.
type LANConfig struct {
	IP, MAC string
}

// User is an IPMI user of the simulated BMC.
//
// ipmi_sim records Priv but, over IPMI v2 (lanplus) with ipmitool's
// name-only lookup, grants a session at whatever privilege the client
// requests (OpenIPMI 2.0.33 lanserv: find_user ignores the privilege and
// the session's maximum is the requested one). What it does enforce is each
// command's privilege against the session's level: a USER session cannot
// control the chassis (completion code 0xD4).
type User struct {
	Name, Password string
	// Priv is the user's maximum privilege in ipmi_sim's words: "user",
	// "operator" or "admin".
	Priv string
}

// simUser is a User with its IPMI user number, for the template.
type simUser struct {
	Num int
	User
}

// Sim is a running ipmi_sim.
type Sim struct {
	Port int
	Dir  string // config, state and ipmi_sim's output (sim.log)
	cmd  *exec.Cmd
}

// RepoRoot finds the module root by walking up from the working directory
// (a package directory under go test).
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("ipmisim: go.mod not found above the working directory")
		}
		dir = parent
	}
}

// BuildVBMC builds cmd/anvil-vbmc into a temporary directory and returns
// the binary's path (used as the chassis-control program).
func BuildVBMC(t testing.TB) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "anvil-vbmc")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/anvil-vbmc")
	cmd.Dir = RepoRoot(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ipmisim: building anvil-vbmc: %v\n%s", err, b)
	}
	return out
}

// SkipIfMissing skips the test when ipmi_sim or ipmitool is not installed.
func SkipIfMissing(t testing.TB) {
	t.Helper()
	for _, b := range []string{"ipmi_sim", "ipmitool"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("%s not installed (Debian packages openipmi, ipmitool): %v", b, err)
		}
	}
}

// freeUDPPort returns a UDP port on 127.0.0.1 that was free a moment ago.
func freeUDPPort(t testing.TB) int {
	t.Helper()
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// Start renders testdata/ipmi/lan.conf.tmpl, starts ipmi_sim as a child of
// the test and stops it at cleanup. It skips the test if ipmi_sim is
// missing.
func Start(t testing.TB, o Options) *Sim {
	t.Helper()
	SkipIfMissing(t)
	if o.Username == "" {
		o.Username = "admin"
	}
	if o.Password == "" {
		o.Password = "password"
	}
	quoted := []string{o.ChassisControl, o.Username, o.Password, o.SOL}
	users := make([]simUser, 0, len(o.Users))
	for i, u := range o.Users {
		switch u.Priv {
		case "user", "operator", "admin":
		default:
			t.Fatalf("ipmisim: user %q: privilege %q is not user, operator or admin", u.Name, u.Priv)
		}
		quoted = append(quoted, u.Name, u.Password)
		users = append(users, simUser{Num: 3 + i, User: u})
	}
	for _, s := range quoted {
		if strings.ContainsAny(s, "\"\n") {
			t.Fatalf("ipmisim: %q cannot be quoted in lan.conf", s)
		}
	}
	root := RepoRoot(t)
	tmpl, err := template.ParseFiles(filepath.Join(root, "testdata", "ipmi", "lan.conf.tmpl"))
	if err != nil {
		t.Fatal(err)
	}
	// The port was free when chosen, but another test process may take it
	// before ipmi_sim binds it: choose again then, a few times.
	for attempt := 1; ; attempt++ {
		sim, err := start(t, root, tmpl, o, users)
		if err == nil {
			return sim
		}
		if !errors.Is(err, errPortTaken) || attempt == 3 || o.Port != 0 {
			t.Fatalf("ipmisim: %v", err)
		}
		t.Logf("ipmisim: %v; trying another port", err)
	}
}

// errPortTaken: ipmi_sim could not bind the port chosen for it.
var errPortTaken = errors.New("ipmi_sim's port was taken")

// start runs one ipmi_sim on a freshly chosen port.
func start(t testing.TB, root string, tmpl *template.Template, o Options, users []simUser) (*Sim, error) {
	s := &Sim{Port: o.Port, Dir: t.TempDir()}
	if s.Port == 0 {
		s.Port = freeUDPPort(t)
	}
	addr := o.Addr
	if addr == "" {
		addr = "127.0.0.1"
	}
	lanProg := ""
	if o.LAN != (LANConfig{}) {
		// ipmi_sim runs it as "<program> get <name>" and reads "name:value".
		lanProg = filepath.Join(s.Dir, "lan-config")
		script := fmt.Sprintf("#!/bin/sh\ncase \"$2\" in\nip_addr) echo ip_addr:%s;;\nip_addr_src) echo ip_addr_src:static;;\nmac_addr) echo mac_addr:%s;;\n"+
			"subnet_mask) echo subnet_mask:255.0.0.0;;\n*mac_addr) echo \"$2:00:00:00:00:00:00\";;\n*) echo \"$2:0.0.0.0\";;\nesac\n", o.LAN.IP, o.LAN.MAC)
		if err := os.WriteFile(lanProg, []byte(script), 0o700); err != nil {
			return nil, err
		}
	}
	var conf bytes.Buffer
	if err := tmpl.Execute(&conf, map[string]any{"Addr": addr, "Port": s.Port, "ChassisControl": o.ChassisControl, "Username": o.Username,
		"Password": o.Password, "Users": users, "LANConfigProgram": lanProg, "KCSPort": o.KCSPort, "SOL": o.SOL}); err != nil {
		return nil, err
	}
	confPath := filepath.Join(s.Dir, "lan.conf")
	state := filepath.Join(s.Dir, "state")
	if err := os.WriteFile(confPath, conf.Bytes(), 0o600); err != nil {
		return nil, err
	}
	if err := os.Mkdir(state, 0o700); err != nil {
		return nil, err
	}
	logPath := filepath.Join(s.Dir, "sim.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	s.cmd = exec.Command("ipmi_sim", "-c", confPath, "-f", filepath.Join(root, "testdata", "ipmi", "sim.emu"), "-s", state, "-n")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	// done is closed when ipmi_sim has exited, with its error in exitErr:
	// a closed channel can be waited on by both waitBound and the cleanup
	// (a value sent once could be taken by only one of them).
	done := make(chan struct{})
	var exitErr error
	go func() { exitErr = s.cmd.Wait(); logf.Close(); close(done) }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Logf("ipmisim: ipmi_sim (pid %d) did not exit 10s after SIGKILL", s.cmd.Process.Pid)
		}
	})
	if err := waitBound(s.Port, done); err != nil {
		<-done // waitBound fails only once it has exited, or after 5 s
		out, _ := os.ReadFile(logPath)
		if bytes.Contains(out, []byte("Address already in use")) {
			return nil, fmt.Errorf("%w: port %d: %v", errPortTaken, s.Port, exitErr)
		}
		return nil, fmt.Errorf("%v (%v)\n%s", err, exitErr, out)
	}
	return s, nil
}

// waitBound waits until ipmi_sim has bound the UDP port, as the kernel's
// socket table shows. It must not probe by binding the port itself: a
// probe holding the port at the moment ipmi_sim binds it made ipmi_sim
// fail with "Address already in use".
func waitBound(port int, exited <-chan struct{}) error {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("ipmi_sim exited")
		default:
		}
		if udpBound("/proc/net/udp", port) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("ipmi_sim did not bind its port within 5s")
}

// udpBound reports whether the socket table at path (/proc/net/udp) has a
// socket bound to port on any local address.
func udpBound(path string, port int) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	want := fmt.Sprintf(":%04X", port)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 1 && strings.HasSuffix(f[1], want) {
			return true
		}
	}
	return false
}
