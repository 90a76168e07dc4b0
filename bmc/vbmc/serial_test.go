package vbmc_test

import (
	"bufio"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc/vbmc"
)

// TestSerialBridgeSurvivesGuestRestarts: the SOL side connects once and
// keeps its connection while the guest's serial socket goes away and comes
// back (a QEMU power cycle); data flows both ways before and after.
func TestSerialBridgeSurvivesGuestRestarts(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "serial.sock")
	b, err := vbmc.NewSerialBridge(nil, "127.0.0.1:0", sock)
	require.NoError(t, err)
	defer b.Close()
	sol, err := net.Dial("tcp", b.Addr())
	require.NoError(t, err)
	defer sol.Close()
	solR := bufio.NewReader(sol)

	for boot := 1; boot <= 2; boot++ {
		guestLn, err := net.Listen("unix", sock) // QEMU's chardev, server=on
		require.NoError(t, err)
		_ = guestLn.(*net.UnixListener).SetDeadline(time.Now().Add(5 * time.Second))
		guest, err := guestLn.Accept()
		require.NoError(t, err, "boot %d: the bridge did not dial the guest's socket", boot)

		_, err = guest.Write([]byte("Linux version boot\n"))
		require.NoError(t, err)
		_ = sol.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := solR.ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, "Linux version boot\n", line)

		_, err = sol.Write([]byte("k"))
		require.NoError(t, err)
		_ = guest.SetReadDeadline(time.Now().Add(5 * time.Second))
		got := make([]byte, 1)
		_, err = guest.Read(got)
		require.NoError(t, err)
		assert.Equal(t, "k", string(got))

		guest.Close() // QEMU exits
		guestLn.Close()
	}
}

// TestSerialBridgeLoopbackOnly: a serial console is a root shell; the
// bridge refuses to listen beyond loopback.
func TestSerialBridgeLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "10.0.0.1:9002", ":9002", "nonsense"} {
		_, err := vbmc.NewSerialBridge(nil, addr, filepath.Join(t.TempDir(), "s"))
		assert.Error(t, err, addr)
	}
}

// TestQEMUSerialListen: with serial_listen the guest's serial is a socket
// chardev that still logs to serial.log, and the bridge listens at once
// (ipmi_sim connects to its SOL device when it starts).
func TestQEMUSerialListen(t *testing.T) {
	dir := t.TempDir()
	q, err := vbmc.NewQEMU(nil, vbmc.QEMUConfig{StateDir: dir, SerialListen: "127.0.0.1:0"})
	require.NoError(t, err)
	defer q.Close()
	args := strings.Join(q.Args(vbmc.BootPXE), " ")
	assert.Contains(t, args, "-chardev socket,id=serial0,path="+filepath.Join(dir, "serial.sock")+",server=on,wait=off,logfile="+q.SerialLog()+",logappend=on")
	c, err := net.Dial("tcp", q.SerialAddr())
	require.NoError(t, err)
	c.Close()

	plain, err := vbmc.NewQEMU(nil, vbmc.QEMUConfig{StateDir: t.TempDir()})
	require.NoError(t, err)
	assert.Empty(t, plain.SerialAddr())
	assert.Contains(t, strings.Join(plain.Args(vbmc.BootPXE), " "), "-chardev file,id=serial0")
}
