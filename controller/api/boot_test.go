package api

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBootScriptAndFiles(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "vmlinuz"), []byte("kernel-bytes"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "initramfs.cpio.gz"), []byte("initramfs-bytes"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ipxe.efi"), []byte("ipxe-efi-bytes"), 0o644))
	e := newEnvWith(t, agentConfig(), ":memory:", func(c *Config) { c.BootDir = dir; c.PublicURL = "http://10.0.2.100:6385" })
	id := e.agentNode("pxe", nil)

	r := e.do("GET", "/v1/boot/pxe/ipxe", "", nil)
	require.Equal(t, 200, r.status)
	assert.True(t, strings.HasPrefix(string(r.body), "#!ipxe\n"))
	assert.Contains(t, string(r.body), "exit 0", "a manageable node expects no agent: boot the next device")
	assert.NotContains(t, string(r.body), id, "said to anybody: nothing about the node")
	assert.NotContains(t, string(r.body), "manageable")
	assert.Contains(t, string(e.do("GET", "/v1/boot/pxe/grub", "", nil).body), "expects no agent now; booting the next device'\nexit\n")

	require.Equal(t, 202, e.provision("pxe", "provide", nil).status)
	e.waitState("pxe", "clean wait")
	r = e.do("GET", "/v1/boot/"+id+"/ipxe", "", nil)
	require.Equal(t, 200, r.status)
	script := string(r.body)
	assert.Contains(t, script, "kernel http://10.0.2.100:6385/v1/boot/files/vmlinuz initrd=initramfs anvil.api=http://10.0.2.100:6385 anvil.node="+id+" anvil.token=")
	nonce := regexp.MustCompile(`anvil\.token=(\S+)`).FindStringSubmatch(script)[1]
	dii := e.do("GET", "/v1/nodes/pxe", latest, nil).json(t)["driver_internal_info"].(map[string]any)
	assert.Equal(t, "******", dii["agent_boot_nonce"], "the API masks the boot's nonce like the token")
	again := string(e.do("GET", "/v1/boot/"+id+"/ipxe", "", nil).body)
	assert.Contains(t, again, "anvil.token="+nonce+" ", "the same address fetching again (a firmware retry) gets the same nonce")

	// Secure Boot nodes get the same kernel command line as a GRUB
	// configuration; {node} may be a port MAC, in any usual spelling.
	for _, ident := range []string{id, "pxe", mac1, strings.ToUpper(strings.ReplaceAll(mac1, ":", "-"))} {
		r = e.do("GET", "/v1/boot/"+ident+"/grub", "", nil)
		require.Equal(t, 200, r.status, ident)
		grub := string(r.body)
		assert.Contains(t, grub, "linux /vmlinuz anvil.api=http://10.0.2.100:6385 anvil.node="+id+" anvil.token="+nonce+" console=tty0 console=ttyS0,115200n8\n", ident)
		assert.Contains(t, grub, "initrd /initramfs.cpio.gz\nboot\n", ident)
	}
	assert.Equal(t, 404, e.do("GET", "/v1/boot/52:54:00:ff:ff:ff/grub", "", nil).status, "no port has that MAC")
	assert.Contains(t, string(e.do("GET", "/v1/boot/"+mac1+"/ipxe", "", nil).body), "anvil.node="+id, "iPXE's ${net0/mac} works as {node} too")

	// the nonce was required from the moment the controller started the
	// boot; a lookup without it gets nothing and stops nothing
	r = e.do("GET", "/v1/lookup?addresses="+mac1+"&boot_id=b1", latest, nil)
	require.Equal(t, 403, r.status)
	assert.Contains(t, r.fault(t), "Not allowed")
	assert.NotContains(t, string(r.body), id, "a stranger learns nothing about the node")
	assert.Equal(t, 403, e.do("GET", "/v1/lookup?addresses="+mac1+"&boot_id=b1&nonce=forged", latest, nil).status)
	r = e.do("GET", "/v1/lookup?addresses="+mac1+"&boot_id=b1&nonce="+nonce, latest, nil)
	require.Equal(t, 200, r.status, string(r.body))
	r = e.do("GET", "/v1/lookup?addresses="+mac1+"&boot_id=b2&nonce="+nonce, latest, nil)
	assert.Equal(t, 403, r.status, "the nonce used twice: %s", r.body)
	assert.Contains(t, r.fault(t), "the operation was stopped")
	n := e.waitState("pxe", "clean failed")
	assert.Contains(t, n["last_error"], "SECURITY ALARM")
	assert.NotContains(t, string(e.do("GET", "/v1/boot/"+id+"/ipxe", "", nil).body), "anvil.token=", "the failed node's script carries no nonce")
	assert.Contains(t, script, "initrd --name initramfs http://10.0.2.100:6385/v1/boot/files/initramfs")
	assert.Contains(t, script, "boot\n")
	assert.Contains(t, script, "console=tty0 console=ttyS0,115200n8", "VGA and the first serial port (the agent mirrors to ttyS1)")

	n2 := e.createNode("pxe2", map[string]any{"deploy_interface": "direct", "driver_info": map[string]any{
		"anvil_public_url": "http://192.0.2.1:6385/", "kernel_append_params": "console=ttyS1 anvil.debug"}})
	require.Equal(t, 201, e.do("POST", "/v1/ports", latest, map[string]any{"address": mac2, "node_uuid": n2["uuid"]}).status)
	require.Equal(t, 202, e.provision("pxe2", "manage", nil).status)
	e.waitState("pxe2", "manageable")
	require.Equal(t, 202, e.provision("pxe2", "provide", nil).status)
	e.waitState("pxe2", "clean wait")
	script = string(e.do("GET", "/v1/boot/pxe2/ipxe", "", nil).body)
	assert.Regexp(t, "anvil.api=http://192.0.2.1:6385 anvil.node="+n2["uuid"].(string)+" anvil.token=\\S+ console=ttyS1 anvil.debug", script, "per-node URL and kernel parameters")
	// "%default%" keeps the default console parameters beside the node's own.
	n3 := e.createNode("pxe3", map[string]any{"deploy_interface": "direct", "driver_info": map[string]any{
		"kernel_append_params": "%default% module_blacklist=ahci"}})
	require.Equal(t, 202, e.provision("pxe3", "manage", nil).status)
	e.waitState("pxe3", "manageable")
	require.Equal(t, 202, e.provision("pxe3", "provide", nil).status)
	e.waitState("pxe3", "clean wait")
	script = string(e.do("GET", "/v1/boot/pxe3/ipxe", "", nil).body)
	assert.Regexp(t, "anvil.node="+n3["uuid"].(string)+" anvil.token=\\S+ console=tty0 console=ttyS0,115200n8 module_blacklist=ahci\n", script)

	f := e.do("GET", "/v1/boot/files/vmlinuz", "", nil)
	require.Equal(t, 200, f.status)
	assert.Equal(t, "kernel-bytes", string(f.body))
	assert.Equal(t, "initramfs-bytes", string(e.do("GET", "/v1/boot/files/initramfs", "", nil).body))
	assert.Equal(t, "ipxe-efi-bytes", string(e.do("GET", "/v1/boot/files/ipxe.efi", "", nil).body), "UEFI HTTP boot's first stage")
	assert.Equal(t, 404, e.do("GET", "/v1/boot/files/snponly.efi", "", nil).status, "not in the boot directory")
	// make image writes a zstd initramfs when the kernel can unpack it.
	require.NoError(t, os.Remove(filepath.Join(dir, "initramfs.cpio.gz")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "initramfs.cpio.zst"), []byte("zstd-initramfs"), 0o644))
	assert.Equal(t, "zstd-initramfs", string(e.do("GET", "/v1/boot/files/initramfs", "", nil).body))
	assert.Contains(t, string(e.do("GET", "/v1/boot/pxe2/grub", "", nil).body), "initrd /initramfs.cpio.zst\n", "GRUB loads the one that is there")
	assert.Equal(t, 404, e.do("GET", "/v1/boot/files/..%2f..%2fetc%2fpasswd", "", nil).status)
	assert.Equal(t, 404, e.do("GET", "/v1/boot/nope/ipxe", "", nil).status)

	plain := newEnv(t)
	r = plain.do("GET", "/v1/boot/x/ipxe", "", nil)
	assert.Equal(t, 404, r.status)
	assert.Contains(t, r.fault(t), "--boot-dir")
}

// Finding: a FIFO in --boot-dir blocked the boot-file handler in open()
// for good. Only regular files are served (a candidate that is something
// else counts as missing), and none of the others is waited on.
func TestBootFilesOnlyRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "vmlinuz")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	require.NoError(t, os.Symlink("vmlinuz", filepath.Join(dir, "initramfs.cpio.zst")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "initramfs.cpio.gz"), []byte("initramfs-bytes"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "ipxe.efi"), 0o755))
	sock, err := net.Listen("unix", filepath.Join(dir, "snponly.efi"))
	require.NoError(t, err)
	defer sock.Close()
	e := newEnv(t, func(c *Config) { c.BootDir = dir })
	// Runs before the server's shutdown: were a handler stuck opening the
	// FIFO, this lets it go.
	t.Cleanup(func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	client := &http.Client{Timeout: 3 * time.Second}
	cases := []struct {
		file   string
		status int
		body   string
	}{
		{"vmlinuz", 404, ""},
		{"initramfs", 200, "initramfs-bytes"}, // the FIFO behind the zstd name is skipped
		{"ipxe.efi", 404, ""},
		{"snponly.efi", 404, ""},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			start := time.Now()
			res, err := client.Get(e.srv.URL + "/v1/boot/files/" + tc.file)
			require.NoError(t, err)
			defer res.Body.Close()
			body, err := io.ReadAll(res.Body)
			require.NoError(t, err)
			assert.Equal(t, tc.status, res.StatusCode)
			if tc.body != "" {
				assert.Equal(t, tc.body, string(body))
			}
			assert.Less(t, time.Since(start), time.Second)
		})
	}
	// OpenBootFile, which the controller also hashes the ramdisk with.
	opened := make(chan *os.File, 1)
	go func() {
		f, _ := OpenBootFile(dir, "vmlinuz")
		opened <- f
	}()
	select {
	case f := <-opened:
		assert.Nil(t, f)
	case <-time.After(time.Second):
		t.Fatal("OpenBootFile blocks on a FIFO")
	}
}
