package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/anvil-metal/anvil/internal/cli"
)

// rulesVersion is the microversion of /v1/inspection_rules.
const rulesVersion = "1.96"

const ruleUsage = `usage: anvil rule COMMAND ...

commands:
  list [--json]              the inspection rules, in the order they run (priority, highest first)
  show RULE                  one rule (JSON); a sensitive rule's actions are masked
  create FILE|-|JSON         create a rule from its JSON document (Ironic's /v1/inspection_rules body)
  delete RULE...             delete rules
  export                     every rule as one JSON document "anvil rule import" reads back;
                             sensitive rules are left out (their credentials cannot be read back)
                             and listed under "skipped_sensitive"
  import FILE|-              create the rules of an export (or of a JSON list of rules)

Rules run after every inspection and when discovery enrols a machine; the
"anvil-manage" action then manages the discovered node.
`

// ruleCmd is "anvil rule COMMAND ...".
func ruleCmd(ctx context.Context, dial connect, args []string, stdin io.Reader, out io.Writer) error {
	if len(args) == 0 {
		return cli.Errorf(ruleUsage, "missing command")
	}
	if cli.IsHelp(args[0]) {
		return cli.Help(ruleUsage)
	}
	sub, rest := args[0], args[1:]
	fs := flag.NewFlagSet("rule "+sub, flag.ContinueOnError)
	var asJSON *bool
	var want []string
	switch sub {
	case "list":
		asJSON = fs.Bool("json", false, "print the rules as JSON")
	case "show":
		want = []string{"RULE"}
	case "delete":
		want = []string{"RULE", "[RULE...]"}
	case "create", "import":
		want = []string{"FILE|-|JSON"}
	case "export":
	default:
		return cli.Errorf(ruleUsage, "unknown command %q", sub)
	}
	pos, err := cli.Parse(fs, ruleUsage, rest, want...)
	if err != nil {
		return err
	}
	c, err := dial()
	if err != nil {
		return err
	}
	switch sub {
	case "list":
		rules, err := listRules(ctx, c)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(out, rules)
		}
		// The order they run in: priority, highest first (stable for ties).
		sort.SliceStable(rules, func(i, j int) bool { return num(rules[i]["priority"]) > num(rules[j]["priority"]) })
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "UUID\tPRIORITY\tPHASE\tSENSITIVE\tACTIONS\tDESCRIPTION")
		for _, r := range rules {
			fmt.Fprintf(tw, "%v\t%v\t%v\t%v\t%s\t%v\n", r["uuid"], r["priority"], r["phase"], r["sensitive"], actionOps(r), dashIfEmpty(r["description"]))
		}
		return tw.Flush()
	case "show":
		var r map[string]any
		if err := c.DoVersion(ctx, rulesVersion, "GET", "/v1/inspection_rules/"+url.PathEscape(pos[0]), nil, &r); err != nil {
			return err
		}
		delete(r, "links")
		return printJSON(out, r)
	case "create":
		doc, err := readJSONArg(pos[0], stdin)
		if err != nil {
			return err
		}
		rule, ok := doc.(map[string]any)
		if !ok {
			return fmt.Errorf("rule create: expected one rule, a JSON object")
		}
		uuid, err := createRule(ctx, c, rule)
		if err != nil {
			return err
		}
		fmt.Fprintln(out, uuid)
		return nil
	case "delete":
		for _, id := range pos {
			if err := c.DoVersion(ctx, rulesVersion, "DELETE", "/v1/inspection_rules/"+url.PathEscape(id), nil, nil); err != nil {
				return fmt.Errorf("delete rule %s: %w", id, err)
			}
			fmt.Fprintf(out, "%s: deleted\n", id)
		}
		return nil
	case "export":
		rules, err := listRules(ctx, c)
		if err != nil {
			return err
		}
		export := []map[string]any{}
		skipped := []string{}
		for _, r := range rules {
			if r["sensitive"] == true {
				skipped = append(skipped, fmt.Sprint(r["uuid"]))
				continue
			}
			for _, k := range []string{"links", "created_at", "updated_at"} {
				delete(r, k)
			}
			export = append(export, r)
		}
		return printJSON(out, map[string]any{"inspection_rules": export, "skipped_sensitive": skipped})
	}
	// import
	doc, err := readJSONArg(pos[0], stdin)
	if err != nil {
		return err
	}
	rules, err := importedRules(doc)
	if err != nil {
		return err
	}
	for i, r := range rules {
		uuid, err := createRule(ctx, c, r)
		if err != nil {
			return fmt.Errorf("import: rule %d of %d (%v): %w (the rules before it were created)", i+1, len(rules), dashIfEmpty(r["uuid"]), err)
		}
		fmt.Fprintf(out, "%s: created\n", uuid)
	}
	return nil
}

// ruleClient is what the rule commands need of the API client.
type ruleClient interface {
	DoVersion(ctx context.Context, version, method, path string, in, out any) error
}

// listRules reads every rule, detailed, page by page.
func listRules(ctx context.Context, c ruleClient) ([]map[string]any, error) {
	var all []map[string]any
	marker := ""
	for {
		path := "/v1/inspection_rules?detail=true&limit=500"
		if marker != "" {
			path += "&marker=" + url.QueryEscape(marker)
		}
		var page struct {
			Rules []map[string]any `json:"inspection_rules"`
		}
		if err := c.DoVersion(ctx, rulesVersion, "GET", path, nil, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Rules...)
		if len(page.Rules) < 500 {
			return all, nil
		}
		marker = fmt.Sprint(page.Rules[len(page.Rules)-1]["uuid"])
	}
}

func createRule(ctx context.Context, c ruleClient, rule map[string]any) (string, error) {
	var created map[string]any
	if err := c.DoVersion(ctx, rulesVersion, "POST", "/v1/inspection_rules", rule, &created); err != nil {
		return "", err
	}
	return fmt.Sprint(created["uuid"]), nil
}

// importedRules are the rules of an export ({"inspection_rules": [...]})
// or of a plain list.
func importedRules(doc any) ([]map[string]any, error) {
	if m, ok := doc.(map[string]any); ok {
		doc = m["inspection_rules"]
	}
	list, ok := doc.([]any)
	if !ok {
		return nil, fmt.Errorf("import: expected an export ({\"inspection_rules\": [...]}) or a JSON list of rules")
	}
	out := make([]map[string]any, 0, len(list))
	for i, v := range list {
		r, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("import: entry %d is not a rule (a JSON object)", i+1)
		}
		for _, k := range []string{"links", "created_at", "updated_at"} {
			delete(r, k)
		}
		out = append(out, r)
	}
	return out, nil
}

// readJSONArg reads a JSON document from a file, standard input (-) or
// the argument itself when it starts with { or [.
func readJSONArg(arg string, stdin io.Reader) (any, error) {
	var r io.Reader = stdin
	switch t := strings.TrimSpace(arg); {
	case strings.HasPrefix(t, "{") || strings.HasPrefix(t, "["):
		r = strings.NewReader(t)
	case arg != "-":
		f, err := os.Open(arg)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	var doc any
	if err := json.NewDecoder(r).Decode(&doc); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	return doc, nil
}

func num(v any) float64 { f, _ := v.(float64); return f }

// actionOps names a rule's actions ("set-attribute,add-trait"); a
// sensitive rule's are not shown by the API.
func actionOps(r map[string]any) string {
	if r["sensitive"] == true && r["actions"] == nil {
		return "(hidden)"
	}
	acts, _ := r["actions"].([]any)
	var ops []string
	for _, a := range acts {
		if m, ok := a.(map[string]any); ok {
			ops = append(ops, fmt.Sprint(m["op"]))
		}
	}
	if len(ops) == 0 {
		return "-"
	}
	return strings.Join(ops, ",")
}

func dashIfEmpty(v any) string {
	if v == nil || v == "" {
		return "-"
	}
	return fmt.Sprint(v)
}
