package docscheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/anvil-metal/anvil/protocol"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const root = "../.."

// markdownFiles are README.md and every Markdown file under docs/, by
// path relative to the repository root.
func markdownFiles(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	add := func(rel string) {
		b, err := os.ReadFile(filepath.Join(root, rel))
		require.NoError(t, err)
		out[rel] = string(b)
	}
	add("README.md")
	require.NoError(t, filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(root, p)
			add(rel)
		}
		return err
	}))
	return out
}

// TestDocsCommands: every fenced shell block is either made of commands
// tests run (Exercised) or marked "not run in tests" with a reason.
func TestDocsCommands(t *testing.T) {
	known := Exercised()
	run, marked := 0, 0
	for file, src := range markdownFiles(t) {
		for _, b := range Blocks(src) {
			if !b.Shell() {
				continue
			}
			where := file + ":" + strconv.Itoa(b.Line)
			if b.Marked {
				assert.NotEmpty(t, b.Reason, "%s: the marker must say why the block is not run", where)
				marked++
				continue
			}
			cmds := Commands(b)
			assert.NotEmpty(t, cmds, "%s: a shell block without commands", where)
			for _, c := range cmds {
				if !anyMatches(known, c) {
					t.Errorf("%s: no test runs %q: add it to Exercised (internal/docscheck/commands.go) with the test that runs it, or put <!-- not run in tests: REASON --> before the block", where, c)
				}
			}
			run++
		}
	}
	t.Logf("fenced shell blocks: %d run by tests, %d marked not run", run, marked)
}

func anyMatches(known []Command, cmd string) bool {
	for _, k := range known {
		if k.Matches(cmd) {
			return true
		}
	}
	return false
}

// TestDocsEvidence: what Exercised claims holds. A renamed test or a
// dropped make dependency fails here, not silently in the docs.
func TestDocsEvidence(t *testing.T) {
	tests := testFunctions(t)
	ci, err := os.ReadFile(filepath.Join(root, ".ci/run"))
	require.NoError(t, err)
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	underTest := prerequisites(string(makefile), "test")
	for _, c := range Exercised() {
		e := c.By
		switch {
		case e.Test != "":
			assert.True(t, tests[e.Test], "%q: no func %s in any _test.go", c.Prefix, e.Test)
		case e.CI:
			assert.Contains(t, strings.Split(string(ci), "\n"), c.Prefix, "%q: .ci/run does not run this line", c.Prefix)
		case e.MakeTest:
			target, ok := strings.CutPrefix(c.Prefix, "make ")
			assert.True(t, ok && underTest[target], "%q: not a prerequisite of make test", c.Prefix)
		case e.Self:
			assert.Contains(t, selfRun(), c.Prefix, "%q: TestDocsRunsCheapCommands does not run it", c.Prefix)
		default:
			t.Errorf("%q: no evidence", c.Prefix)
		}
	}
}

// testFunctions finds every func TestX in the repository's test files,
// whatever their build tags.
func testFunctions(t *testing.T) map[string]bool {
	out := map[string]bool{}
	re := regexp.MustCompile(`(?m)^func (Test\w+)\(`)
	require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "out" || d.Name() == "bin" || strings.HasPrefix(d.Name(), ".")) && p != root {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, "_test.go") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range re.FindAllStringSubmatch(string(b), -1) {
				out[m[1]] = true
			}
		}
		return nil
	}))
	return out
}

// prerequisites returns the make targets target depends on, directly or
// not, from the Makefile's "target: prerequisites" lines.
func prerequisites(makefile, target string) map[string]bool {
	deps := map[string][]string{}
	re := regexp.MustCompile(`(?m)^([a-z][a-z-]*):([^=\n#]*)`)
	for _, m := range re.FindAllStringSubmatch(makefile, -1) {
		deps[m[1]] = append(deps[m[1]], strings.Fields(m[2])...)
	}
	out := map[string]bool{}
	var walk func(string)
	walk = func(t string) {
		for _, d := range deps[t] {
			if !out[d] {
				out[d] = true
				walk(d)
			}
		}
	}
	walk(target)
	return out
}

// selfRun are the commands TestDocsRunsCheapCommands runs.
func selfRun() []string { return []string{"make help"} }

// TestDocsRunsCheapCommands runs the documented commands that cost next
// to nothing, as a reader would.
func TestDocsRunsCheapCommands(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	for _, c := range selfRun() {
		cmd := exec.Command("sh", "-c", c)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s:\n%s", c, out)
		switch c {
		case "make help":
			for _, target := range []string{"demo", "test", "build", "docs"} {
				assert.Regexp(t, `(?m)^  `+target+` `, string(out), "make help lists %s", target)
			}
		}
	}
}

// TestDocsLinks: every relative link in the docs, and in the READMEs of
// image/ and bmc/vbmc/ that they link to, names a file that exists, and a
// heading that exists when it has an #anchor into Markdown.
func TestDocsLinks(t *testing.T) {
	files := markdownFiles(t)
	for _, rel := range []string{"image/README.md", "bmc/vbmc/README.md"} {
		b, err := os.ReadFile(filepath.Join(root, rel))
		require.NoError(t, err)
		files[rel] = string(b)
	}
	for file, src := range files {
		for _, l := range Links(src) {
			if strings.Contains(l.Target, "://") || strings.HasPrefix(l.Target, "mailto:") {
				continue
			}
			where := file + ":" + strconv.Itoa(l.Line)
			path, anchor, _ := strings.Cut(l.Target, "#")
			target := file
			if path != "" {
				target = filepath.Join(filepath.Dir(file), path)
				if _, err := os.Stat(filepath.Join(root, target)); err != nil {
					t.Errorf("%s: link to %s: %v", where, l.Target, err)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			body, ok := files[target]
			if !ok {
				b, err := os.ReadFile(filepath.Join(root, target))
				require.NoError(t, err)
				body = string(b)
			}
			assert.True(t, Anchors(body)[anchor], "%s: %s has no heading #%s", where, target, anchor)
		}
	}
}

// TestDocsKernelParameters: every kernel command line parameter the agent
// reads (the cases of agent.parseArgs) and every flag of anvil-agent has a
// row in docs/reference/agent.md.
func TestDocsKernelParameters(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "docs/reference/agent.md"))
	require.NoError(t, err)
	params := kernelParameters(t)
	require.NotEmpty(t, params)
	for _, p := range params {
		assert.Contains(t, string(doc), "`"+p, "docs/reference/agent.md has no row for the kernel parameter %s", p)
	}
	main, err := os.ReadFile(filepath.Join(root, "cmd/anvil-agent/main.go"))
	require.NoError(t, err)
	flags := regexp.MustCompile(`fs\.\w+\((?:&[\w.]+, )?"([a-z][a-z-]*)"`).FindAllStringSubmatch(string(main), -1)
	require.NotEmpty(t, flags)
	for _, f := range flags {
		assert.Contains(t, string(doc), "`--"+f[1]+"`", "docs/reference/agent.md has no row for anvil-agent --%s", f[1])
	}
}

// kernelParameters reads the case labels of agent.parseArgs.
func kernelParameters(t *testing.T) []string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(root, "agent/cmdline.go"), nil, 0)
	require.NoError(t, err)
	// The parameters spelled as protocol constants, shared with the controller.
	constants := map[string]string{"CmdlineNonce": protocol.CmdlineNonce, "CmdlineFingerprint": protocol.CmdlineFingerprint}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		fn, ok := n.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "parseArgs" {
			return true
		}
		ast.Inspect(fn, func(n ast.Node) bool {
			cc, ok := n.(*ast.CaseClause)
			if !ok {
				return true
			}
			for _, e := range cc.List {
				switch e := e.(type) {
				case *ast.BasicLit:
					s, err := strconv.Unquote(e.Value)
					require.NoError(t, err)
					out = append(out, s)
				case *ast.SelectorExpr:
					s, ok := constants[e.Sel.Name]
					require.True(t, ok, "agent/cmdline.go: parseArgs reads %s; add it to kernelParameters' constants", e.Sel.Name)
					out = append(out, s)
				default:
					t.Errorf("agent/cmdline.go: a case of parseArgs this test cannot read: %T", e)
				}
			}
			return true
		})
		return false
	})
	return out
}
