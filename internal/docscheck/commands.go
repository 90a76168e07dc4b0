package docscheck

import "strings"

// Evidence is how a command shown in the docs is known to work. Exactly
// one field is set, and the docs test checks that it holds: the test
// exists, the CI script runs the line, the make target is a prerequisite
// of make test, or the docs test runs the command itself.
type Evidence struct {
	Test     string // a Go test that runs the command (or the same program with the same arguments)
	CI       bool   // .ci/run runs this exact line
	MakeTest bool   // a make target that make test depends on
	Self     bool   // TestDocsRunsCheapCommands runs it
}

// Command is a command the docs may show without a "not run in tests"
// marker: every command line whose first words are Prefix.
type Command struct {
	Prefix string
	By     Evidence
}

// Matches reports whether the command line cmd starts with c's words.
func (c Command) Matches(cmd string) bool {
	want, got := strings.Fields(c.Prefix), strings.Fields(cmd)
	if len(got) < len(want) {
		return false
	}
	for i := range want {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// Exercised lists the commands the docs show that tests run. Add a
// command here with the test that runs it; a command no test runs gets a
// marker in the docs instead.
func Exercised() []Command {
	compat := Evidence{Test: "TestCompatBaremetalCLI"}
	return []Command{
		{"make test", Evidence{CI: true}},
		{"make build", Evidence{MakeTest: true}},
		{"make help", Evidence{Self: true}},
		{"make demo-sim", Evidence{Test: "TestDemoSimulated"}},
		{"bin/anvil-controller --database sqlite://:memory: --simulate-agents", Evidence{Test: "TestSimulatedAgents"}},
		{"bin/anvil-controller --tls-self-signed --print-fingerprint", Evidence{Test: "TestPrintFingerprint"}},
		{"bin/anvil-controller export --database", Evidence{Test: "TestExportImportCommands"}},
		{"bin/anvil-controller import --database", Evidence{Test: "TestExportImportCommands"}},
		{"export OS_AUTH_TYPE=none OS_ENDPOINT=http://127.0.0.1:6385", compat},
		{"baremetal node create --driver fake-hardware", compat},
		{"baremetal port create", compat},
		{"baremetal node manage", compat},
		{"baremetal node provide", compat},
		{"baremetal node deploy", compat},
		{"baremetal node undeploy", compat},
		{"baremetal node list", compat},
		{"baremetal node set", compat},
		{"baremetal allocation create --resource-class", compat},
		{"baremetal allocation delete", compat},
		{"baremetal node vif attach", compat},
	}
}
