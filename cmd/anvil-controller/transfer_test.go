package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/postgres/pgserver"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
)

// cliResult is one run of the binary as a command.
type cliResult struct {
	stdout, stderr string
	code           int
}

// runCLI runs the controller binary with args, env added to the
// environment and stdin (nil: none), and waits for it.
func runCLI(t *testing.T, env []string, stdin io.Reader, args ...string) cliResult {
	t.Helper()
	bin, err := buildOnce()
	require.NoError(t, err)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		require.NoError(t, err)
	}
	return cliResult{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
}

// stopController ends a controller with SIGTERM, as an operator would
// before an export.
func stopController(t *testing.T, p *controllerProc) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("controller did not stop on SIGTERM")
	}
}

var exportedAtRE = regexp.MustCompile(`"exported_at":"[^"]*"`)

func withoutExportedAt(doc string) string {
	return exportedAtRE.ReplaceAllString(doc, `"exported_at":""`)
}

// TestExportImportCommands moves a fleet made through the API from one
// SQLite database to another (and to PostgreSQL) with the two commands of
// the real binary, and checks the new controller serves the same fleet.
func TestExportImportCommands(t *testing.T) {
	dir := t.TempDir()
	srcDB := "sqlite://" + filepath.Join(dir, "src.db")
	p := startController(t, "--database", srcDB, "--public-url", "http://anvil.test")
	for i := 0; i < 3; i++ {
		require.Equal(t, 201, send(t, "POST", p.URL+"/v1/nodes", fmt.Sprintf(
			`{"driver":"fake-hardware","name":"n%d","driver_info":{"password":"pw%d"}}`, i, i)))
	}
	_, n0 := getJSON(t, p.URL, "/v1/nodes/n0")
	require.Equal(t, 201, send(t, "POST", p.URL+"/v1/ports", fmt.Sprintf(`{"address":"52:54:00:00:00:01","node_uuid":%q}`, n0["uuid"])))
	require.Equal(t, 202, send(t, "PUT", p.URL+"/v1/nodes/n1/states/provision", `{"target":"manage"}`))
	require.Eventually(t, func() bool {
		_, n := getJSON(t, p.URL, "/v1/nodes/n1")
		return n["provision_state"] == "manageable" && n["reservation"] == nil
	}, 10*time.Second, 10*time.Millisecond)
	_, before := getJSON(t, p.URL, "/v1/nodes/detail")
	_, portsBefore := getJSON(t, p.URL, "/v1/ports/detail")
	stopController(t, p)

	file := filepath.Join(dir, "fleet.json")
	res := runCLI(t, nil, nil, "export", "--database", srcDB, "-o", file)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Equal(t, "exported 0 chassis, 3 nodes, 0 portgroups, 1 ports, 0 allocations, 0 volume connectors, 0 volume targets, "+historyCount(t, file)+
		" history events, 0 inventories, 0 step results, 0 erase records, 0 deploy templates, 0 runbooks, 0 inspection rules, 5 BIOS settings, 0 firmware components to "+file+" (mode 0600: it contains BMC credentials)\n", res.stderr)
	fi, err := os.Stat(file)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	doc, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Contains(t, string(doc), `"password":"pw2"`)

	// ANVIL_DATABASE and standard output, as the daemon reads its settings.
	res = runCLI(t, []string{"ANVIL_DATABASE=" + srcDB}, nil, "export")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Equal(t, withoutExportedAt(string(doc)), withoutExportedAt(res.stdout))
	assert.Contains(t, res.stderr, "the document contains BMC credentials: keep it private")

	dstDB := "sqlite://" + filepath.Join(dir, "dst.db")
	res = runCLI(t, nil, nil, "import", "--database", dstDB, file)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stderr, "imported 0 chassis, 3 nodes, 0 portgroups, 1 ports, 0 allocations, 0 volume connectors")

	res = runCLI(t, nil, nil, "import", "--database", dstDB, file)
	assert.Equal(t, 1, res.code)
	assert.Contains(t, res.stderr, "import: target database is not empty: it holds nodes")

	// From a pipe, into another new database.
	res = runCLI(t, nil, bytes.NewReader(doc), "import", "--database", "sqlite://"+filepath.Join(dir, "pipe.db"), "-")
	require.Equal(t, 0, res.code, res.stderr)

	p = startController(t, "--database", dstDB, "--public-url", "http://anvil.test")
	_, after := getJSON(t, p.URL, "/v1/nodes/detail")
	_, portsAfter := getJSON(t, p.URL, "/v1/ports/detail")
	assert.Equal(t, before, after)
	assert.Equal(t, portsBefore, portsAfter)
	stopController(t, p)

	t.Run("postgres", func(t *testing.T) {
		pg := pgserver.ForTest(t)
		url := pg.NewDatabase(t)
		res := runCLI(t, []string{"ANVIL_DATABASE=" + url}, nil, "import", file)
		require.Equal(t, 0, res.code, res.stderr)
		res = runCLI(t, nil, nil, "export", "--database", url)
		require.Equal(t, 0, res.code, res.stderr)
		assert.Equal(t, withoutExportedAt(string(doc)), withoutExportedAt(res.stdout))
	})
}

// historyCount is the number of history events in an export file.
func historyCount(t *testing.T, file string) string {
	t.Helper()
	doc, err := os.ReadFile(file)
	require.NoError(t, err)
	_, history, ok := strings.Cut(string(doc), "\n\"history\":[\n")
	require.True(t, ok)
	history, _, _ = strings.Cut(history, "\n]")
	return fmt.Sprint(strings.Count(history, "\n") + 1)
}

func TestExportRefusesReservedNodes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "anvil.db")
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path)
	require.NoError(t, err)
	name := "busy"
	n := &store.Node{UUID: "00000000-0000-4000-8000-000000000001", Name: &name, Driver: "fake-hardware",
		ProvisionState: "cleaning", Reservation: &name, CreatedAt: time.Now().UTC()}
	require.NoError(t, st.CreateNode(ctx, n))
	require.NoError(t, st.Close())

	res := runCLI(t, nil, nil, "export", "--database", "sqlite://"+path)
	assert.Equal(t, 1, res.code)
	assert.Empty(t, res.stdout)
	assert.Contains(t, res.stderr, "anvil-controller: export: nodes are reserved by a running operation: "+
		"00000000-0000-4000-8000-000000000001 (cleaning, held by busy); a fleet exported mid-operation cannot resume reliably")
	assert.Contains(t, res.stderr, "or export anyway with --force")

	res = runCLI(t, nil, nil, "export", "--database", "sqlite://"+path, "--force")
	assert.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, `"reservation":"busy"`)
}

func TestTransferCommandErrors(t *testing.T) {
	dir := t.TempDir()
	tests := map[string]struct {
		args []string
		code int
		want string
	}{
		"export help":     {[]string{"export", "--help"}, 0, "The document contains the BMC credentials of every node"},
		"import help":     {[]string{"import", "-h"}, 0, "usage: anvil-controller import [--database URL] FILE|-"},
		"no database":     {[]string{"export"}, 1, "anvil-controller: export: no database: pass --database URL or set ANVIL_DATABASE"},
		"missing sqlite":  {[]string{"export", "--database", "sqlite://" + dir + "/nope.db"}, 1, "export: no database at " + dir + "/nope.db"},
		"no file":         {[]string{"import", "--database", "sqlite://" + dir + "/a.db"}, 2, "anvil-controller: missing FILE|-\n\nusage: anvil-controller import"},
		"missing file":    {[]string{"import", "--database", "sqlite://" + dir + "/a.db", dir + "/nope.json"}, 1, "no such file or directory"},
		"export argument": {[]string{"export", "--database", "sqlite://" + dir + "/a.db", "out.json"}, 2, `unexpected argument "out.json" (the output file is -o FILE)`},
		"bad URL":         {[]string{"import", "--database", "mysql://root:pw@db/x", "-"}, 1, "unsupported database URL"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			res := runCLI(t, []string{"ANVIL_DATABASE="}, strings.NewReader(""), tt.args...)
			assert.Equal(t, tt.code, res.code, res.stderr)
			if tt.code == 0 {
				assert.Contains(t, res.stdout, tt.want, "help goes to stdout")
				assert.Empty(t, res.stderr)
				return
			}
			assert.Contains(t, res.stderr, tt.want)
			assert.NotContains(t, res.stderr, "pw@")
		})
	}
}
