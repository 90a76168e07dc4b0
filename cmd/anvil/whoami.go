package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/anvil-metal/anvil/internal/cli"
)

const whoamiUsage = `usage: anvil whoami [--json]

Who the controller takes these credentials for (ANVIL_USERNAME): the
account, its roles, and its scope, system or one project. Without a users
file on the controller every account is a system admin.
`

// whoami is "anvil whoami".
func whoami(ctx context.Context, dial connect, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("whoami", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "the API's document as it is")
	if _, err := cli.Parse(fs, whoamiUsage, args); err != nil {
		return err
	}
	c, err := dial()
	if err != nil {
		return err
	}
	var body struct {
		User        *string  `json:"user"`
		Roles       []string `json:"roles"`
		SystemScope *string  `json:"system_scope"`
		ProjectID   *string  `json:"project_id"`
		Auth        string   `json:"auth"`
		UsersFile   bool     `json:"users_file"`
	}
	if err := c.Do(ctx, "GET", "/v1/whoami", nil, &body); err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(body)
	}
	user := "(anonymous)"
	if body.User != nil {
		user = *body.User
	}
	scope := "system"
	if body.ProjectID != nil {
		scope = "project " + *body.ProjectID
	}
	note := ""
	if !body.UsersFile {
		note = " (no users file: every account is a system admin)"
	}
	_, err = fmt.Fprintf(out, "user   %s\nauth   %s%s\nroles  %s\nscope  %s\n", user, body.Auth, note, strings.Join(body.Roles, ", "), scope)
	return err
}
