package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestGeneratedUpToDate: the checked-in man pages and completions are what
// the command tree makes now (run `go run ./internal/gendocs` after
// changing a command), and no man page is left of a command that is gone.
func TestGeneratedUpToDate(t *testing.T) {
	root := filepath.Join("..", "..")
	files, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("only %d files generated", len(files))
	}
	for rel, want := range files {
		got, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not what the commands make now (%v): run `go run ./internal/gendocs`", rel, err)
		}
	}
	pages, _ := filepath.Glob(filepath.Join(root, "docs", "man", "*.8"))
	for _, p := range pages {
		rel, _ := filepath.Rel(root, p)
		if _, ok := files[rel]; !ok {
			t.Errorf("%s documents a command that no longer exists: run `go run ./internal/gendocs`", rel)
		}
	}
}
