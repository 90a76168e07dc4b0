package conductor

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The package's shape is part of its design (#34): a type that gathers
// every flow's methods becomes the next Conductor, and working state kept in
// driver_internal_info is what the typed operation record replaced. These
// tests keep both from creeping back.

// maxMethods is the most methods one type of this package may have.
const maxMethods = 30

func parsePackage(t *testing.T) map[string]*ast.File {
	t.Helper()
	names, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		require.NoError(t, err, name)
		files[name] = f
	}
	require.Contains(t, files, "engine.go", "the shape tests must read the conductor's own files")
	return files
}

func receiverType(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return ""
	}
	typ := fd.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	switch x := typ.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.IndexExpr: // generic receiver
		if id, ok := x.X.(*ast.Ident); ok {
			return id.Name
		}
	}
	return ""
}

func TestNoTypeHasMoreThanMaxMethods(t *testing.T) {
	count := map[string]int{}
	for _, f := range parsePackage(t) {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok {
				if r := receiverType(fd); r != "" {
					count[r]++
				}
			}
		}
	}
	var over []string
	for typ, n := range count {
		if n > maxMethods {
			over = append(over, typ)
		}
	}
	sort.Strings(over)
	for _, typ := range over {
		t.Errorf("type %s has %d methods (at most %d): split it by what it owns", typ, count[typ], maxMethods)
	}
}

func TestEveryFileSaysWhatItOwns(t *testing.T) {
	for name, f := range parsePackage(t) {
		// The first comment of the file: the package doc or a comment
		// before the first declaration.
		var first *ast.CommentGroup
		if len(f.Comments) > 0 {
			first = f.Comments[0]
		}
		if !assert.NotNil(t, first, "%s has no comment saying what it owns", name) {
			continue
		}
		// It must come before any declaration other than the imports.
		for _, d := range f.Decls {
			if gd, ok := d.(*ast.GenDecl); ok && gd.Tok == token.IMPORT {
				continue
			}
			assert.Less(t, first.Pos(), d.Pos(), "%s: its first comment must come before its first declaration and say what the file owns", name)
			break
		}
		assert.GreaterOrEqual(t, len(strings.Fields(first.Text())), 5, "%s: its first comment is too short to say what the file owns", name)
	}
}

func TestDriverInternalInfoOnlyInTheWireFormatBuilder(t *testing.T) {
	for name, f := range parsePackage(t) {
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "DriverInternalInfo" {
				t.Errorf("%s reads or writes driver_internal_info; working state belongs in the node's operation record", name)
			}
			return true
		})
	}
}
