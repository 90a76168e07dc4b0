package cli

import (
	"bytes"
	"errors"
	"flag"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string // positional names the command takes
		pos  []string
		wait bool
		code int    // Exit's code
		out  string // in stdout (code 0) or stderr
	}{
		{name: "flags around the name", args: []string{"--wait", "n1", "--timeout", "1s"}, want: []string{"NODE"}, pos: []string{"n1"}, wait: true},
		{name: "no arguments", code: 0},
		{name: "-h", args: []string{"-h"}, out: "usage: t [--wait]\n\nflags:\n  -timeout"},
		{name: "--help after a name", args: []string{"n1", "--help"}, want: []string{"NODE"}, out: "usage: t"},
		{name: "help word", args: []string{"help"}, out: "usage: t"},
		{name: "help where a name is taken", args: []string{"help"}, want: []string{"NODE"}, out: "usage: t"},
		{name: "help among names is one", args: []string{"a", "help"}, want: []string{"A", "B"}, pos: []string{"a", "help"}},
		{name: "unknown flag", args: []string{"n1", "--bogus"}, want: []string{"NODE"}, code: 2, out: "t: flag provided but not defined: -bogus\n\nusage: t"},
		{name: "bad value", args: []string{"--timeout", "soon"}, code: 2, out: `invalid value "soon" for flag -timeout`},
		{name: "stray word", args: []string{"frob"}, code: 2, out: `t: unexpected argument "frob"`},
		{name: "missing name", want: []string{"NODE", "FILE"}, code: 2, out: "t: missing NODE FILE"},
		{name: "flag-like name after --", args: []string{"--", "-"}, want: []string{"NODE"}, code: 2, out: `"-" cannot be NODE: it starts with "-"`},
		{name: "- where standard input is offered", args: []string{"-"}, want: []string{"FILE|-"}, pos: []string{"-"}},
		{name: "optional", args: []string{"a", "b"}, want: []string{"A", "[B]"}, pos: []string{"a", "b"}},
		{name: "optional absent", args: []string{"a"}, want: []string{"A", "[B]"}, pos: []string{"a"}},
		{name: "too many", args: []string{"a", "b", "c"}, want: []string{"A", "[B]"}, code: 2, out: `unexpected argument "c"`},
		{name: "any number", args: []string{"a", "b", "c"}, want: []string{"A", "[B...]"}, pos: []string{"a", "b", "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			wait := fs.Bool("wait", false, "wait")
			fs.Duration("timeout", 0, "give up after")
			pos, err := Parse(fs, "usage: t [--wait]\n", tt.args, tt.want...)
			var stdout, stderr bytes.Buffer
			code := Exit(&stdout, &stderr, "t", err)
			require.Equal(t, tt.code, code, "stderr: %s", stderr.String())
			if code == 0 {
				assert.Empty(t, stderr.String())
				assert.Contains(t, stdout.String(), tt.out)
			} else {
				assert.Empty(t, stdout.String())
				assert.Contains(t, stderr.String(), tt.out)
				assert.Contains(t, stderr.String(), "usage: t", "a usage error shows the usage")
			}
			if err == nil {
				assert.Equal(t, tt.pos, pos)
				assert.Equal(t, tt.wait, *wait)
			}
		})
	}
}

func TestFlagsStopsAtTheFirstWord(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	url := fs.String("url", "", "controller")
	rest, err := Flags(fs, "usage: t COMMAND\n", []string{"--url", "u", "node", "--wait"})
	require.NoError(t, err)
	assert.Equal(t, "u", *url)
	assert.Equal(t, []string{"node", "--wait"}, rest)
}

func TestExit(t *testing.T) {
	var stdout, stderr bytes.Buffer
	assert.Equal(t, 1, Exit(&stdout, &stderr, "t", errors.New("no controller")))
	assert.Equal(t, "t: no controller\n", stderr.String())
	stderr.Reset()
	assert.Equal(t, 0, Exit(&stdout, &stderr, "t", Help("usage: t\n")))
	assert.Equal(t, "usage: t\n", stdout.String())
	assert.Empty(t, stderr.String())
	assert.True(t, IsHelp("--help") && IsHelp("-h") && IsHelp("-help") && IsHelp("help") && !IsHelp("--helpme"))
}
