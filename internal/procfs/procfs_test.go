package procfs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		name string
		stat string
		want Process
		ok   bool
	}{
		{"plain", "42 (postgres) S 1 42 42 0 -1", Process{42, 1, 42}, true},
		{"name with spaces and parentheses", "42 (a b) (c)) R 7 9 9 0", Process{42, 7, 9}, true},
		{"truncated", "42 (x) S 1", Process{}, false},
		{"no name", "42 S 1 2", Process{}, false},
		{"not numbers", "42 (x) S a b", Process{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseStat(42, tt.stat)
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestListAndCmdlineOnAFixture(t *testing.T) {
	root := t.TempDir()
	write := func(pid, name, content string) {
		require.NoError(t, os.MkdirAll(filepath.Join(root, pid), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, pid, name), []byte(content), 0o644))
	}
	write("10", "stat", "10 (postgres) S 1 10 10 0\n")
	write("10", "cmdline", "postgres\x00-p\x005433\x00")
	write("11", "stat", "11 (postgres: walwriter) S 10 10 10 0\n")
	write("self", "stat", "99 (x) S 1 1 1 0\n")                       // not a pid: left out
	require.NoError(t, os.MkdirAll(filepath.Join(root, "12"), 0o755)) // ended: no stat

	ps, err := List(root)
	require.NoError(t, err)
	assert.ElementsMatch(t, []Process{{10, 1, 10}, {11, 10, 10}}, ps)
	assert.Equal(t, []string{"postgres", "-p", "5433"}, Cmdline(root, 10))
	assert.Nil(t, Cmdline(root, 11))

	_, err = List(filepath.Join(root, "missing"))
	assert.Error(t, err)
}

func TestListSeesThisProcess(t *testing.T) {
	ps, err := List("/proc")
	require.NoError(t, err)
	found := false
	for _, p := range ps {
		if p.PID == os.Getpid() {
			found = true
			assert.Equal(t, os.Getppid(), p.PPID)
		}
	}
	assert.True(t, found)
	assert.NotEmpty(t, Cmdline("/proc", os.Getpid()))
}
