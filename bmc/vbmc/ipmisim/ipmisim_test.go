package ipmisim

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUDPBoundReadsTheSocketTable(t *testing.T) {
	table := filepath.Join(t.TempDir(), "udp")
	require.NoError(t, os.WriteFile(table, []byte(
		"   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n"+
			"  12: 0100007F:C350 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1 2 0 0\n"), 0o600))
	assert.True(t, udpBound(table, 50000))
	assert.False(t, udpBound(table, 5000), "another port")
	assert.False(t, udpBound(table, 50001))
	assert.False(t, udpBound(filepath.Join(t.TempDir(), "missing"), 50000))

	// And the kernel's own table sees a socket this test binds.
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer c.Close()
	assert.True(t, udpBound("/proc/net/udp", c.LocalAddr().(*net.UDPAddr).Port))
}
