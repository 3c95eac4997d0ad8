package tooltest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSkipsGoThroughNeed: every test in the module that skips does so
// under -short (inside if testing.Short()) or through Need, so the summary
// line names every test skipped for a missing tool, and CI fails each one.
func TestSkipsGoThroughNeed(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "go.mod"))
	var bad []string
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || filepath.Dir(path) == filepath.Join(root, "internal", "tooltest") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, pos := range straySkips(f) {
			p := fset.Position(pos)
			rel, _ := filepath.Rel(root, p.Filename)
			bad = append(bad, rel+":"+strconv.Itoa(p.Line))
		}
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, bad, "tests that skip neither under -short nor through tooltest.Need: a missing tool must fail CI and be named by go run ./internal/tooltest/skipped")
}

// straySkips returns the positions of x.Skip, x.Skipf and x.SkipNow calls
// in f that are not inside an if whose condition calls testing.Short.
func straySkips(f *ast.File) []token.Pos {
	var out []token.Pos
	var stack []ast.Node
	ast.Inspect(f, func(n ast.Node) bool {
		if n == nil {
			stack = stack[:len(stack)-1]
			return true
		}
		stack = append(stack, n)
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !slices.Contains([]string{"Skip", "Skipf", "SkipNow"}, sel.Sel.Name) {
			return true
		}
		if _, ok := sel.X.(*ast.Ident); ok && !underShort(stack) {
			out = append(out, call.Pos())
		}
		return true
	})
	return out
}

// underShort reports whether the innermost node of stack is in the body of
// an if whose condition calls testing.Short.
func underShort(stack []ast.Node) bool {
	for i := len(stack) - 2; i >= 0; i-- {
		ifs, ok := stack[i].(*ast.IfStmt)
		if ok && stack[i+1] == ifs.Body && callsShort(ifs.Cond) {
			return true
		}
	}
	return false
}

func callsShort(e ast.Expr) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Short" {
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "testing" {
				found = true
			}
		}
		return !found
	})
	return found
}

// TestNeed: a missing tool skips the test outside CI and fails it in CI,
// naming the tool and the command that installs it.
func TestNeed(t *testing.T) {
	missing := &Tool{Name: "no-such-tool", For: "this test", find: lookPath("bothy-no-such-tool"), packages: fixed("no-such-package")}
	for _, ci := range []string{"", "false", "true"} {
		t.Run("CI="+ci, func(t *testing.T) {
			t.Setenv("CI", ci)
			rec := &recorder{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				Need(rec, missing)
			}()
			<-done
			want := "apt-get install -y --no-install-recommends no-such-package"
			require.Contains(t, rec.msg, "no-such-tool not found")
			require.Contains(t, rec.msg, want)
			require.Equal(t, CI(), rec.failed, "failed under CI only")
			require.Equal(t, !CI(), rec.skipped, "skipped outside CI only")
		})
	}
	found := &Tool{Name: "sh", find: lookPath("sh"), packages: fixed()}
	require.NotEmpty(t, Need(t, found))
}

// recorder stands in for a test's testing.TB: Fatal and Skip record and
// end the goroutine, as theirs do.
type recorder struct {
	testing.TB
	msg             string
	failed, skipped bool
}

func (r *recorder) Helper() {}

func (r *recorder) Fatal(args ...any) {
	r.msg, r.failed = fmt.Sprint(args...), true
	runtime.Goexit()
}

func (r *recorder) Skip(args ...any) {
	r.msg, r.skipped = fmt.Sprint(args...), true
	runtime.Goexit()
}
