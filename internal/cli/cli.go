// Package cli is the command-line convention the anvil commands share:
// -h, -help, --help and a "help" word print a command's usage to standard
// output and succeed; an unknown flag, a stray word or an argument that
// looks like a flag is an error naming it, with the usage on standard error.
//
// It only parses what it is given; reading os.Args and the environment is
// left to the commands' main packages.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// UsageError is a help request (Err is flag.ErrHelp) or a command line
// that does not fit the command; Usage is the text that describes it.
type UsageError struct {
	Usage string
	Err   error
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Help is the answer to a help request for the command described by usage.
func Help(usage string) error { return &UsageError{Usage: usage, Err: flag.ErrHelp} }

// Errorf is a usage error: the message, then the usage, on standard error.
func Errorf(usage, format string, args ...any) error {
	return &UsageError{Usage: usage, Err: fmt.Errorf(format, args...)}
}

// IsHelp reports whether word asks for help where a command word is expected.
func IsHelp(word string) bool {
	return word == "help" || word == "-h" || word == "-help" || word == "--help"
}

// Flags parses the flags in front of args' first word and returns the rest,
// for a command that goes on to a subcommand. usage is the command's text;
// its flags' descriptions are added to it.
func Flags(fs *flag.FlagSet, usage string, args []string) ([]string, error) {
	// Quiet: the flag package's own messages would go to standard error
	// even for help; Exit prints the usage where it belongs instead.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		return nil, &UsageError{Usage: Usage(fs, usage), Err: err}
	}
	return fs.Args(), nil
}

// Parse parses args for a command that takes the positional arguments
// named by want (e.g. "NODE", "FILE|-"; a last "[VALUE]" is optional, a
// last "[VALUE...]" takes any number), with flags before, between and
// after them. A positional argument that starts with "-" is refused, so
// a mistyped flag never becomes a name; a lone "-" is accepted only where
// want offers it (standard input). A lone "help" word asks for the usage.
func Parse(fs *flag.FlagSet, usage string, args []string, want ...string) ([]string, error) {
	var pos []string
	for {
		rest, err := Flags(fs, usage, args)
		if err != nil {
			return nil, err
		}
		if len(rest) == 0 {
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	usage = Usage(fs, usage)
	// A lone "help" is a help request even where a name is taken: that is
	// what it means at a prompt; a node can be named by its UUID, a file
	// as ./help.
	if len(pos) == 1 && pos[0] == "help" {
		return nil, Help(usage)
	}
	required, limit := len(want), len(want)
	if required > 0 && strings.HasPrefix(want[required-1], "[") {
		required--
		if strings.HasSuffix(want[required], "...]") {
			limit = -1
		}
	}
	for i, p := range pos {
		name := "an argument"
		if i < len(want) {
			name = strings.Trim(want[i], "[.]")
		}
		// After "--" or as a lone "-": not a flag, but no name either.
		if strings.HasPrefix(p, "-") && (p != "-" || !slices.Contains(strings.Split(name, "|"), "-")) {
			return nil, Errorf(usage, "%q cannot be %s: it starts with \"-\"", p, name)
		}
	}
	switch {
	case len(pos) < required:
		return nil, Errorf(usage, "missing %s", strings.Join(want[len(pos):required], " "))
	case limit >= 0 && len(pos) > limit:
		return nil, Errorf(usage, "unexpected argument %q", pos[limit])
	}
	return pos, nil
}

// Usage is usage followed by the descriptions of fs's flags, if any: the
// text a command level with flags shows.
func Usage(fs *flag.FlagSet, usage string) string {
	var b strings.Builder
	b.WriteString(strings.TrimRight(usage, "\n"))
	b.WriteString("\n")
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		b.WriteString("\nflags:\n")
		fs.SetOutput(&b)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return b.String()
}

// Exit reports err the anvil way and returns the exit code: 0 and the
// usage on stdout for a help request, 2 and the message and usage on
// stderr for a usage error, 1 and the message for any other error.
func Exit(stdout, stderr io.Writer, name string, err error) int {
	var ue *UsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue) && errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, ue.Usage)
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "%s: %v\n\n%s", name, err, ue.Usage)
		return 2
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	return 1
}
