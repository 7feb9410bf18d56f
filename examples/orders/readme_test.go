package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// The README shows this service's placeOrder and consumer as they are
// here, comments included, and its first command runs this package: a
// change to either that the README does not follow fails here.
func TestReadmeShowsTheServiceAsItIs(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("service.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "service.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	shown := map[string]bool{"placeOrder": false, "consumer": false}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		if _, want := shown[fd.Name.Name]; !want {
			continue
		}
		shown[fd.Name.Name] = true
		text := string(src[fset.Position(fd.Doc.Pos()).Offset:fset.Position(fd.End()).Offset])
		if !strings.Contains(string(readme), "```go\n"+text+"\n```") {
			t.Errorf("README.md does not show %s as service.go has it:\n%s", fd.Name.Name, text)
		}
	}
	for name, found := range shown {
		if !found {
			t.Errorf("service.go has no function %s for the README to show", name)
		}
	}
	first := string(readme[:min(len(readme), 2500)])
	for _, command := range []string{"scripts/services.sh && go run ./examples/orders", "make test"} {
		if !strings.Contains(first, command) {
			t.Errorf("the README's first screen does not show %q", command)
		}
	}
}
