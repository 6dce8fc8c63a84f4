package ops

import (
	"go/ast"
	"go/parser"
	"go/token"
	iofs "io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// tree is what the docs may name: every Go package directory, every file,
// and every declared identifier (funcs, methods as Type.Method and
// pkg.Name, types, consts, vars).
type tree struct {
	dirs  map[string]bool // package directories, relative, slash-separated
	files map[string]bool // every file, relative
	names map[string]bool // Name, Type.Method, pkg.Name
}

func loadTree(t *testing.T) *tree {
	t.Helper()
	root := repo(t)
	tr := &tree{dirs: map[string]bool{}, files: map[string]bool{}, names: map[string]bool{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d iofs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if name := d.Name(); rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		tr.files[rel] = true
		if !strings.HasSuffix(rel, ".go") {
			return nil
		}
		tr.dirs[filepath.ToSlash(filepath.Dir(rel))] = true
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkg := filepath.Base(filepath.Dir(rel))
		add := func(n string) { tr.names[n] = true; tr.names[pkg+"."+n] = true }
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv != nil && len(d.Recv.List) == 1 {
					if recv := recvName(d.Recv.List[0].Type); recv != "" {
						add(recv + "." + d.Name.Name)
					}
					tr.names[d.Name.Name] = true
					continue
				}
				add(d.Name.Name)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						add(s.Name.Name)
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, f := range st.Fields.List {
								for _, n := range f.Names {
									tr.names[n.Name] = true
									tr.names[s.Name.Name+"."+n.Name] = true
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							add(n.Name)
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func recvName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

var (
	codeSpan    = regexp.MustCompile("`([^`]+)`")
	testName    = regexp.MustCompile(`^(Test|Fuzz|Benchmark)\w*`)
	identifier  = regexp.MustCompile(`^[A-Za-z_]\w*(\.[A-Za-z_]\w*)?$`)
	pathLike    = regexp.MustCompile(`^[\w.-]+(/[\w.<>-]+)*/?$`)
	camel       = regexp.MustCompile(`^[a-z]+[A-Z]`)
	mainPackage = regexp.MustCompile(`(?m)^package main$`)
)

// known reports whether the tree has what span names, and whether span
// names code at all (a command, a value or a SQL word is not checked).
func (tr *tree) known(span string) (ok, code bool) {
	switch {
	case testName.MatchString(span):
		base, _, _ := strings.Cut(span, "/")
		return tr.names[base], true
	case strings.HasSuffix(span, ".go") && pathLike.MatchString(span):
		for f := range tr.files {
			if f == span || strings.HasSuffix(f, "/"+span) {
				return true, true
			}
		}
		return false, true
	case strings.Contains(span, "/") && pathLike.MatchString(span) && !strings.Contains(span, "<"):
		p := strings.TrimSuffix(span, "/")
		if tr.dirs[p] || tr.files[p] {
			return true, true
		}
		for d := range tr.dirs { // a directory holding packages (test/, services/x/internal)
			if strings.HasPrefix(d, p+"/") {
				return true, true
			}
		}
		return false, true
	case identifier.MatchString(span) && !strings.HasPrefix(span, "SLUICE_"):
		// Code is an exported or camelCase name (Settler, natsx.Backoff,
		// putGroup) or anything declared; a lowercase dotted word is a
		// setting (catalog.gc_grace).
		last := span[strings.LastIndex(span, ".")+1:]
		if tr.names[span] {
			return true, true
		}
		if last[0] >= 'A' && last[0] <= 'Z' || camel.MatchString(last) {
			return false, true
		}
	}
	return false, false
}

// notCode are spans of INVARIANTS.md that look like identifiers but name no
// Go declaration: commands, settings, values.
var notCode = map[string]bool{
	"Host": true, ".seg/": true,
}

// TestInvariantsNameExistingCode: every test, function, type, file and
// package INVARIANTS.md names exists, and every rule of its table names
// both its code and its test, so a newcomer goes from a rule to either in
// one search.
func TestInvariantsNameExistingCode(t *testing.T) {
	tr := loadTree(t)
	doc := string(read(t, "INVARIANTS.md"))
	var missing []string
	for _, m := range codeSpan.FindAllStringSubmatch(doc, -1) {
		span := m[1]
		if notCode[span] {
			continue
		}
		for _, part := range strings.Split(span, ", ") {
			if ok, code := tr.known(part); code && !ok {
				missing = append(missing, part)
			}
		}
	}
	slices.Sort(missing)
	if missing = slices.Compact(missing); len(missing) > 0 {
		t.Errorf("INVARIANTS.md names what the tree does not have:\n  %s", strings.Join(missing, "\n  "))
	}
	for _, line := range strings.Split(doc, "\n") {
		cells := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| ") || len(cells) < 4 || strings.HasPrefix(line, "| #") {
			continue
		}
		rule, enforced := cells[0]+" | "+cells[1], cells[2]
		num := strings.TrimPrefix(cells[0], "| ")
		if num == "---" || strings.HasPrefix(num, "---") {
			continue
		}
		var code, tests bool
		for _, m := range codeSpan.FindAllStringSubmatch(rule+" "+enforced, -1) {
			for _, part := range strings.Split(m[1], ", ") {
				ok, isCode := tr.known(part)
				switch {
				case !ok || !isCode:
				case testName.MatchString(part):
					tests = true
				case strings.HasSuffix(part, ".go"):
					code = code || !strings.HasSuffix(part, "_test.go")
				case identifier.MatchString(part):
					code = code || !isTestKit(part)
				}
			}
		}
		if !code || !tests {
			t.Errorf("INVARIANTS.md rule %s names code %v, tests %v: each rule names both", num, code, tests)
		}
	}
}

// isTestKit reports whether span names a test package or helper rather
// than the code a rule lives in.
func isTestKit(span string) bool {
	return strings.HasPrefix(span, "test/") || strings.HasSuffix(span, "test") || strings.Contains(span, "test/") || span == "make model"
}

// layoutRows returns the paths of ARCHITECTURE.md's layout table.
func layoutRows(t *testing.T) []string {
	t.Helper()
	doc := string(read(t, "ARCHITECTURE.md"))
	start := strings.Index(doc, "\n## Layout\n")
	if start < 0 {
		t.Fatal("ARCHITECTURE.md has no Layout section")
	}
	section := doc[start+len("\n## Layout\n"):]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	var paths []string
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.HasPrefix(line, "| `") {
			continue
		}
		for _, m := range codeSpan.FindAllStringSubmatch(cells[1], -1) {
			paths = append(paths, strings.TrimSuffix(m[1], "/"))
		}
	}
	return paths
}

// TestArchitectureLayoutMatchesTree: ARCHITECTURE.md's layout table lists
// every package directory of the tree (a row `a/<name>` stands for each
// directory in its place) and only directories that exist; every package
// has a doc.go, except a main package, whose doc is its main.go's.
func TestArchitectureLayoutMatchesTree(t *testing.T) {
	tr := loadTree(t)
	rows := layoutRows(t)
	match := func(row, dir string) bool {
		pat := regexp.MustCompile(`<\w+>`).ReplaceAllString(regexp.QuoteMeta(row), `[\w.-]+`)
		ok, _ := regexp.MatchString("^"+pat+"$", dir)
		return ok
	}
	for _, row := range rows {
		found := false
		for d := range tr.dirs {
			if match(row, d) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("ARCHITECTURE.md layout lists %s: no such package", row)
		}
	}
	var dirs []string
	for d := range tr.dirs {
		if d != "." {
			dirs = append(dirs, d)
		}
	}
	slices.Sort(dirs)
	for _, d := range dirs {
		if !slices.ContainsFunc(rows, func(row string) bool { return match(row, d) }) {
			t.Errorf("package %s is not in ARCHITECTURE.md's layout", d)
		}
		if tr.files[d+"/doc.go"] {
			continue
		}
		main, err := os.ReadFile(filepath.Join(repo(t), d, "main.go"))
		if err != nil || !mainPackage.Match(main) {
			t.Errorf("package %s has no doc.go", d)
		}
	}
}
