package tftp

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FuzzParsePacket: no input panics the parser; what parses survives an
// encode/decode round trip, and option negotiation stays within the RFC
// limits and the server's timeout cap whatever a request asks.
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
		f.Add(p.marshal(), uint8(5))
	}
	for _, v := range []string{"5", "6", "255", "256", "0", "-1", "+3", "05"} {
		f.Add((&packet{op: opRRQ, filename: "f", mode: "octet", order: []string{"timeout"}, options: map[string]string{"timeout": v}}).marshal(), uint8(5))
	}
	f.Add([]byte{0, 1, 0, 0}, uint8(5))
	f.Add([]byte{0, 5, 0}, uint8(0))
	f.Add([]byte{0, 1, 'a', 0, 'o', 'c', 't', 'e', 't', 0, 'b', 'l', 'k', 's', 'i', 'z', 'e', 0, '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', 0}, uint8(255))
	f.Fuzz(func(t *testing.T, b []byte, maxTimeout uint8) {
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
			n, order, acc := negotiate(p, maxBlockSize, int(maxTimeout))
			assert.True(t, n.blockSize >= minBlockSize && n.blockSize <= maxBlockSize)
			assert.True(t, n.windowSize >= 1 && n.windowSize <= maxWindowSize)
			assert.True(t, n.timeoutSec >= 0 && n.timeoutSec <= min(int(maxTimeout), maxTimeoutSecs))
			assert.Len(t, acc, len(order))
			// A timeout is either accepted as is or declined (absent).
			if v, ok := acc["timeout"]; ok {
				assert.Equal(t, strconv.Itoa(n.timeoutSec), v)
			} else {
				assert.Zero(t, n.timeoutSec)
			}
			if _, err := cleanName(p.filename); err == nil {
				assert.NotContains(t, "/"+p.filename+"/", "/../")
			}
		}
	})
}
