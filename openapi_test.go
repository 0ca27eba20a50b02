//go:build !race && !noopenapi && !wasip1

package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	liberrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// notInOpenAPI are the route-adding methods of *server that routes()
// calls but whose routes are not the API's, and why.
var notInOpenAPI = map[string]string{
	"dashRoutes": "the merchant dashboard: HTML pages for people (docs/dashboard.md)",
	"demoRoutes": "the demo's shop and game app, served only by go run . without a configuration",
}

// TestOpenAPIDocument checks openapi.json as a document: OpenAPI 3.1, valid
// against the specification's schema, and built into the model the
// contract tests validate with.
func TestOpenAPIDocument(t *testing.T) {
	doc, err := libopenapi.NewDocument(openAPIDocument)
	require.NoError(t, err, "parsing openapi.json")
	assert.Equal(t, "3.1.0", doc.GetVersion(), "openapi.json's openapi")
	model, err := doc.BuildV3Model()
	require.NoError(t, err, "building openapi.json's model")
	require.NotNil(t, model.Model.Components.Schemas.GetOrZero("Error"), "components.schemas.Error, every error's body")
	v, errs := validator.NewValidator(doc)
	require.Empty(t, errs, "validator of openapi.json")
	ok, verrs := v.ValidateDocument()
	assert.True(t, ok, "openapi.json against the OpenAPI 3.1 schema: %s", describe(verrs))
}

// TestOpenAPIRoutes checks that every route of the API (routes() and the
// route-adding methods it calls, but notInOpenAPI) has an operation in
// openapi.json and every operation a route; and that the service's mux
// sends each operation's path to the route of the same pattern.
func TestOpenAPIRoutes(t *testing.T) {
	routes := apiRoutes(t)
	require.NotEmpty(t, routes, "the routes found in the source")
	ops := openAPIOperations(t)
	for _, r := range routes {
		assert.Contains(t, ops, r, "route %q has no operation in openapi.json", r)
	}
	for _, op := range ops {
		assert.Contains(t, routes, op, "operation %q of openapi.json has no route", op)
	}

	a := newTestApp(t, testConfig(cfgOpts{}))
	mux := a.srv.routes()
	for _, op := range ops {
		method, path, _ := strings.Cut(op, " ")
		// Each {name} becomes a value of its own: the mux then matches
		// the path as a client's request would.
		probe := path
		for strings.Contains(probe, "{") {
			i, j := strings.Index(probe, "{"), strings.Index(probe, "}")
			probe = probe[:i] + "x" + strconv.Itoa(i) + probe[j+1:]
		}
		_, pattern := mux.Handler(httptest.NewRequest(method, probe, nil))
		assert.Equal(t, op, pattern, "the mux's route of %s %s", method, probe)
	}
}

// TestOpenAPIServed checks GET /openapi.json: the embedded document, as
// JSON.
func TestOpenAPIServed(t *testing.T) {
	a := newTestApp(t, testConfig(cfgOpts{}))
	w := httptest.NewRecorder()
	a.srv.handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/openapi.json", nil))
	require.Equal(t, http.StatusOK, w.Code, "GET /openapi.json: %s", w.Body)
	assert.Equal(t, "application/json", w.Header().Get("Content-Type"), "GET /openapi.json's Content-Type")
	file, err := os.ReadFile("openapi.json")
	require.NoError(t, err)
	assert.Equal(t, file, w.Body.Bytes(), "GET /openapi.json serves openapi.json")
}

// openAPIOperations are openapi.json's operations as mux patterns:
// "METHOD /path/{name}".
func openAPIOperations(t *testing.T) []string {
	t.Helper()
	doc, err := libopenapi.NewDocument(openAPIDocument)
	require.NoError(t, err)
	model, err := doc.BuildV3Model()
	require.NoError(t, err)
	var ops []string
	for path, item := range model.Model.Paths.PathItems.FromOldest() {
		for method := range item.GetOperations().FromOldest() {
			ops = append(ops, strings.ToUpper(method)+" "+path)
		}
	}
	slices.Sort(ops)
	return ops
}

// apiRoutes reads the package's source for the patterns that routes()
// adds, directly or through the route-adding methods it calls (those of
// notInOpenAPI aside), as mux patterns. A pattern it cannot evaluate
// fails the test: a new way of adding routes needs this reader to learn
// it.
func apiRoutes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	methods := map[string]*ast.FuncDecl{} // the methods of *server by name
	consts := map[string]ast.Expr{}       // the package's string constants
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		require.NoError(t, err)
		for _, d := range file.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv != nil && len(d.Recv.List) == 1 {
					if star, ok := d.Recv.List[0].Type.(*ast.StarExpr); ok {
						if id, ok := star.X.(*ast.Ident); ok && id.Name == "server" {
							methods[d.Name.Name] = d
						}
					}
				}
			case *ast.GenDecl:
				collectConsts(d, consts)
			}
		}
	}
	var routes []string
	var visit func(name string)
	visit = func(name string) {
		fn := methods[name]
		require.NotNil(t, fn, "method (*server).%s", name)
		local := maps.Clone(consts)
		ranges := map[string][]ast.Expr{} // a range's key variable: the keys of the map literal it ranges over
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GenDecl:
				collectConsts(n, local)
			case *ast.RangeStmt:
				key, ok := n.Key.(*ast.Ident)
				lit, isLit := n.X.(*ast.CompositeLit)
				if ok && isLit {
					for _, e := range lit.Elts {
						if kv, ok := e.(*ast.KeyValueExpr); ok {
							ranges[key.Name] = append(ranges[key.Name], kv.Key)
						}
					}
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				recv, _ := sel.X.(*ast.Ident)
				switch {
				case recv != nil && recv.Name == "mux" && (sel.Sel.Name == "HandleFunc" || sel.Sel.Name == "Handle"):
					exprs := []ast.Expr{n.Args[0]}
					if id, ok := n.Args[0].(*ast.Ident); ok && ranges[id.Name] != nil {
						exprs = ranges[id.Name]
					}
					for _, e := range exprs {
						p, ok := constString(e, local)
						require.True(t, ok, "%s: a pattern this test cannot evaluate", fset.Position(e.Pos()))
						if p != "/" { // the catch-all: 404 and 405 for what no route takes
							routes = append(routes, p)
						}
					}
				case recv != nil && recv.Name == "s" && len(n.Args) == 1 && isIdent(n.Args[0], "mux"):
					if _, skip := notInOpenAPI[sel.Sel.Name]; !skip {
						visit(sel.Sel.Name)
					}
				}
			}
			return true
		})
	}
	visit("routes")
	slices.Sort(routes)
	return routes
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// collectConsts adds d's constants with a value to consts.
func collectConsts(d *ast.GenDecl, consts map[string]ast.Expr) {
	if d.Tok != token.CONST {
		return
	}
	for _, s := range d.Specs {
		vs := s.(*ast.ValueSpec)
		for i, name := range vs.Names {
			if i < len(vs.Values) {
				consts[name.Name] = vs.Values[i]
			}
		}
	}
}

// constString evaluates e, a string constant expression of literals,
// constants and +.
func constString(e ast.Expr, consts map[string]ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.Ident:
		if v, ok := consts[e.Name]; ok {
			return constString(v, consts)
		}
	case *ast.ParenExpr:
		return constString(e.X, consts)
	case *ast.BinaryExpr:
		if e.Op == token.ADD {
			x, ok1 := constString(e.X, consts)
			y, ok2 := constString(e.Y, consts)
			return x + y, ok1 && ok2
		}
	}
	return "", false
}

// describe lists errs, each with the reason and where in the body.
func describe(errs []*liberrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "\n  - %s: %s", e.Message, e.Reason)
		for _, s := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, "\n      %s: %s", s.FieldPath, s.Reason)
		}
	}
	return b.String()
}

// TestOpenAPIInDocs checks that docs/api.md names every operation of
// openapi.json, its webhooks' included, beside the call it describes.
func TestOpenAPIInDocs(t *testing.T) {
	doc, err := libopenapi.NewDocument(openAPIDocument)
	require.NoError(t, err)
	model, err := doc.BuildV3Model()
	require.NoError(t, err)
	prose, err := os.ReadFile(filepath.Join("docs", "api.md"))
	require.NoError(t, err)
	var ids []string
	items := slices.Collect(model.Model.Paths.PathItems.ValuesFromOldest())
	items = append(items, slices.Collect(model.Model.Webhooks.ValuesFromOldest())...)
	for _, item := range items {
		for op := range item.GetOperations().ValuesFromOldest() {
			ids = append(ids, op.OperationId)
		}
	}
	require.NotEmpty(t, ids, "openapi.json's operations")
	for _, id := range ids {
		assert.Contains(t, string(prose), "`"+id+"`", "docs/api.md names operation %q of openapi.json", id)
	}
}
