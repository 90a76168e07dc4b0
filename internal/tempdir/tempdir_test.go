package tempdir

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const prefix = "anvil-test-"

// TestHoldingProcess is not a test: run by holdingProcess, it makes a
// directory, says its path and waits to be killed.
func TestHoldingProcess(t *testing.T) {
	parent := os.Getenv("TEMPDIR_TEST_PARENT")
	if parent == "" {
		t.Skip("only run as another process by the tests")
	}
	d, err := New(parent, prefix)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println(d.Path)
	// Nothing refers to d any more, as in a program that keeps its Dir
	// only for the process's sake: the lock must outlive a collection.
	runtime.GC()
	runtime.GC()
	select {}
}

// holdingProcess starts another process that holds a directory in parent
// and returns it with the directory's path.
func holdingProcess(t *testing.T, parent string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHoldingProcess$")
	cmd.Env = append(os.Environ(), "TEMPDIR_TEST_PARENT="+parent)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	path := strings.TrimSpace(line)
	require.True(t, strings.HasPrefix(path, filepath.Join(parent, prefix)), "child said %q", line)
	return cmd, path
}

// TestSweepTakesOnlyAbandonedDirectories: Sweep removes the directories
// of processes that died without removing them (SIGKILL) and nothing
// else: not a live process's (another controller's on the machine), not
// this one's, not anything else that has the prefix.
func TestSweepTakesOnlyAbandonedDirectories(t *testing.T) {
	parent := t.TempDir()
	killed, abandoned := holdingProcess(t, parent)
	_, alive := holdingProcess(t, parent)
	require.NoError(t, killed.Process.Signal(syscall.SIGKILL))
	_ = killed.Wait()
	require.DirExists(t, abandoned, "a killed process cannot remove its directory")

	mine, err := New(parent, prefix)
	require.NoError(t, err)
	t.Cleanup(func() { _ = mine.Remove() })

	keep := map[string]string{}
	unmarked := filepath.Join(parent, prefix+"unmarked")
	require.NoError(t, os.Mkdir(unmarked, 0o700))
	keep[unmarked] = "a directory without the marker (an older release's, or made by hand)"
	markedDir := filepath.Join(parent, prefix+"marker-is-a-dir")
	require.NoError(t, os.MkdirAll(filepath.Join(markedDir, Marker), 0o700))
	keep[markedDir] = "a marker that is no regular file"
	file := filepath.Join(parent, prefix+"file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	keep[file] = "a file"
	// a link to an abandoned directory of New's: the link is no directory
	target := filepath.Join(t.TempDir(), prefix+"target")
	require.NoError(t, os.MkdirAll(target, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(target, Marker), nil, 0o600))
	link := filepath.Join(parent, prefix+"link")
	require.NoError(t, os.Symlink(target, link))
	keep[link] = "a link to a directory"
	keep[target] = "what a link points to"
	other := filepath.Join(parent, "other-prefix")
	require.NoError(t, os.Mkdir(other, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(other, Marker), nil, 0o600))
	keep[other] = "another prefix"
	keep[alive] = "a live process's"
	keep[mine.Path] = "this process's"

	removed, err := Sweep(parent, prefix)
	require.NoError(t, err)
	assert.Equal(t, []string{abandoned}, removed)
	assert.NoDirExists(t, abandoned)
	for path, what := range keep {
		_, err := os.Lstat(path)
		assert.NoError(t, err, "%s is kept", what)
	}

	removed, err = Sweep(parent, prefix)
	require.NoError(t, err)
	assert.Empty(t, removed, "once is enough")
}

func TestRemove(t *testing.T) {
	parent := t.TempDir()
	d, err := New(parent, prefix)
	require.NoError(t, err)
	assert.FileExists(t, filepath.Join(d.Path, Marker))
	require.NoError(t, os.WriteFile(filepath.Join(d.Path, "x.iso"), []byte("iso"), 0o600))
	require.NoError(t, d.Remove())
	assert.NoDirExists(t, d.Path)
	assert.NoError(t, d.Remove(), "again")

	_, err = Sweep(parent, "a/b")
	assert.Error(t, err, "a prefix is a plain name")
	_, err = Sweep(parent, "")
	assert.Error(t, err)
}
