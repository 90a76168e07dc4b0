package tftp

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FuzzParsePacket: no input panics the parser; what parses survives an
// encode/decode round trip, and option negotiation stays within the RFC
// limits whatever a request asks.
func FuzzParsePacket(f *testing.F) {
	seeds := []*packet{
		{op: opRRQ, filename: "undionly.kpxe", mode: "octet"},
		{op: opRRQ, filename: "/ipxe.efi", mode: "octet", order: []string{"tsize", "blksize", "windowsize", "timeout"},
			options: map[string]string{"tsize": "0", "blksize": "1468", "windowsize": "16", "timeout": "2"}},
		{op: opRRQ, filename: "../etc/passwd", mode: "netascii"},
		{op: opWRQ, filename: "x", mode: "octet"},
		{op: opDATA, block: 7, data: []byte("hello")},
		{op: opACK, block: 65535},
		{op: opERROR, code: 1, msg: "file not found"},
		{op: opOACK, order: []string{"blksize"}, options: map[string]string{"blksize": "512"}},
	}
	for _, p := range seeds {
		f.Add(p.marshal())
	}
	f.Add([]byte{0, 1, 0, 0})
	f.Add([]byte{0, 5, 0})
	f.Add([]byte{0, 1, 'a', 0, 'o', 'c', 't', 'e', 't', 0, 'b', 'l', 'k', 's', 'i', 'z', 'e', 0, '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := parsePacket(b)
		if err != nil {
			return
		}
		q, err := parsePacket(p.marshal())
		require.NoError(t, err)
		assert.Equal(t, p.op, q.op)
		assert.Equal(t, p.filename, q.filename)
		assert.Equal(t, p.mode, q.mode)
		assert.Equal(t, p.options, q.options)
		assert.Equal(t, p.block, q.block)
		assert.Equal(t, p.code, q.code)
		if p.op == opRRQ {
			n, order, acc := negotiate(p, maxBlockSize)
			assert.True(t, n.blockSize >= minBlockSize && n.blockSize <= maxBlockSize)
			assert.True(t, n.windowSize >= 1 && n.windowSize <= maxWindowSize)
			assert.True(t, n.timeoutSec >= 0 && n.timeoutSec <= maxTimeoutSecs)
			assert.Len(t, acc, len(order))
			if _, err := cleanName(p.filename); err == nil {
				assert.NotContains(t, "/"+p.filename+"/", "/../")
			}
		}
	})
}
