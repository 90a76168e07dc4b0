package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/anvil-metal/anvil/controller"
	"github.com/anvil-metal/anvil/controller/transfer"
	"github.com/anvil-metal/anvil/internal/cli"
)

const exportUsage = `usage: anvil-controller export [--database URL] [-o FILE] [--force]

Writes the whole fleet of the database (nodes with every field, ports,
portgroups, allocations, node history, hardware inventories) as one JSON
document, to FILE or to standard output. Use it with import to move a fleet
between SQLite and PostgreSQL.

The document contains the BMC credentials of every node (driver_info):
FILE is created readable by its owner only (mode 0600); keep it so.

Stop the controllers first: the export is not one transaction. It refuses
while nodes are reserved by a running operation, because an operation cut
off mid-way cannot resume reliably from another database; --force exports
anyway (the reservations go along, and the controller started on the new
database resumes those operations at their persisted step).

The database defaults to $ANVIL_DATABASE.

`

const importUsage = `usage: anvil-controller import [--database URL] FILE|-

Creates the fleet of an export document (FILE, or standard input for -) in
the database, which must be empty: a new SQLite file, or a new PostgreSQL
database. Run it with no controller attached to that database.

A document read from a file is checked completely before anything is
written. If writing fails half-way (or a document read from standard input
turns out damaged), the database is incomplete: drop it and import again.

The database defaults to $ANVIL_DATABASE.

`

// runTransfer runs the export and import subcommands.
func runTransfer(ctx context.Context, cmd string, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("anvil-controller "+cmd, flag.ContinueOnError)
	database := fs.String("database", "", "database `URL`: sqlite://PATH or postgres://USER:PASSWORD@HOST/DB (default $ANVIL_DATABASE)")
	var output *string
	var force *bool
	usage := importUsage
	if cmd == "export" {
		usage = exportUsage
		output = fs.String("o", "", "write the document to `FILE` (mode 0600) instead of standard output")
		force = fs.Bool("force", false, "export even while nodes are reserved by a running operation")
	}
	want := "FILE|-"
	if cmd == "export" {
		// Taken to name them in the error: the output file is -o FILE.
		want = "[FILE...]"
	}
	pos, err := cli.Parse(fs, usage, args, want)
	if err != nil {
		return err
	}
	if cmd == "export" && len(pos) > 0 {
		return cli.Errorf(cli.Usage(fs, usage), "export: unexpected argument %q (the output file is -o FILE)", pos[0])
	}
	if *database == "" {
		*database = getenv("ANVIL_DATABASE")
	}
	if *database == "" {
		return fmt.Errorf("%s: no database: pass --database URL or set ANVIL_DATABASE", cmd)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cmd == "export" {
		return runExport(ctx, *database, *output, *force, stdout, stderr)
	}
	return runImport(ctx, *database, pos[0], stdin, stderr)
}

func runExport(ctx context.Context, database, output string, force bool, stdout, stderr io.Writer) error {
	// Opening a SQLite path creates a database: a typo'd path would export
	// an empty fleet.
	if path, ok := strings.CutPrefix(database, "sqlite://"); ok && path != ":memory:" {
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("export: no database at %s: %w", path, err)
		}
	}
	st, err := controller.OpenStore(ctx, database)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer st.Close()
	opts := transfer.ExportOptions{Force: force}
	if output == "" {
		sum, err := transfer.Export(ctx, st, stdout, opts)
		if err != nil {
			return fmt.Errorf("export: %w", err)
		}
		fmt.Fprintf(stderr, "exported %s; the document contains BMC credentials: keep it private\n", sum)
		return nil
	}
	sum, err := exportFile(ctx, st, output, opts)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	fmt.Fprintf(stderr, "exported %s to %s (mode 0600: it contains BMC credentials)\n", sum, output)
	return nil
}

// exportFile writes the document next to path and renames it into place
// once complete, so path never holds a partial export; the file is created
// 0600 because the document holds credentials.
func exportFile(ctx context.Context, src transfer.Source, path string, opts transfer.ExportOptions) (transfer.Summary, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return transfer.Summary{}, err
	}
	defer os.Remove(f.Name()) // after a successful rename, a no-op
	sum, err := transfer.Export(ctx, src, f, opts)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return sum, err
	}
	return sum, os.Rename(f.Name(), path)
}

func runImport(ctx context.Context, database, input string, stdin io.Reader, stderr io.Writer) error {
	r := stdin
	if input != "-" {
		f, err := os.Open(input)
		if err != nil {
			return fmt.Errorf("import: %w", err)
		}
		defer f.Close()
		r = f
	}
	st, err := controller.OpenStore(ctx, database)
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	defer st.Close()
	sum, err := transfer.Import(ctx, st, r, transfer.ImportOptions{})
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	fmt.Fprintf(stderr, "imported %s\n", sum)
	return nil
}
