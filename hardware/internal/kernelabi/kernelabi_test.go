package kernelabi

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLayoutsMatchTheKernels(t *testing.T) {
	assert.Equal(t, uintptr(72), unsafe.Sizeof(NVMeAdminCmd{}), "struct nvme_admin_cmd")
	assert.Equal(t, uintptr(88), unsafe.Sizeof(SGIOHdr{}), "struct sg_io_hdr")
}

func TestBufferIsPageAligned(t *testing.T) {
	b, free, err := Buffer(8192)
	require.NoError(t, err)
	defer free()
	assert.Len(t, b, 8192)
	assert.Zero(t, uintptr(unsafe.Pointer(&b[0]))%4096)
}
