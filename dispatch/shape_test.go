package dispatch_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestShape pins the shape the request path was given so that it stays
// readable as features land (one object per hop, one responder, spans
// behind telemetry.Spans): no function takes more than 6 parameters, no
// type has more than 25 methods, and no file but the recorder's builds
// span attributes (dispatch imports no otel/attribute at all: the
// recorder lives in package telemetry).
func TestShape(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	methods := map[string]int{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "go.opentelemetry.io/otel/attribute" {
				t.Errorf("%s imports %s: span attributes belong to telemetry.Spans", name, p)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var ft *ast.FuncType
			what := ""
			switch fn := n.(type) {
			case *ast.FuncDecl:
				ft, what = fn.Type, fn.Name.Name
				if fn.Recv != nil && len(fn.Recv.List) == 1 {
					methods[recvName(fn.Recv.List[0].Type)]++
				}
			case *ast.FuncLit:
				ft, what = fn.Type, "func literal"
			default:
				return true
			}
			params := 0
			for _, p := range ft.Params.List {
				params += max(1, len(p.Names))
			}
			if params > 6 {
				t.Errorf("%s: %s takes %d parameters (at most 6: give the state an object)", fset.Position(n.Pos()), what, params)
			}
			return true
		})
	}
	for typ, n := range methods {
		if n > 25 {
			t.Errorf("type %s has %d methods (at most 25: split the concept)", typ, n)
		}
	}
	if methods["attempt"] == 0 || methods["call"] == 0 || methods["responder"] == 0 {
		t.Fatalf("the shape test does not see the request path's types: %v", methods)
	}
}

func recvName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return recvName(x.X)
	case *ast.IndexExpr:
		return recvName(x.X)
	case *ast.Ident:
		return x.Name
	}
	return "?"
}
