// Command gendocs writes sluice's man pages and shell completions from
// its command tree, so that they say what the code does:
//
//	go run ./internal/gendocs            # from the repository's root
//
// It writes docs/man/sluice*.8 and packaging/completion/{sluice.bash,
// _sluice,sluice.fish}. TestGeneratedUpToDate fails when the checked-in
// files differ from what it would write. It is a command of its own so that
// the daemon's binary does not link the man page renderer.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/sluicegw/sluice/cli"
)

// manDate is the date the man pages carry: fixed, so that generating them
// again changes nothing unless the commands do. Move it when the commands
// change.
var manDate = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func main() {
	root := flag.String("root", ".", "the repository's root")
	flag.Parse()
	files, err := generate()
	if err == nil {
		err = writeAll(*root, files)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gendocs:", err)
		os.Exit(1)
	}
}

// generate renders every file, keyed by its path relative to the root.
func generate() (map[string][]byte, error) {
	files := map[string][]byte{}
	tmp, err := os.MkdirTemp("", "gendocs")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	root := cli.Root()
	root.DisableAutoGenTag = true
	hdr := &doc.GenManHeader{Title: "SLUICE", Section: "8", Source: "sluice", Manual: "System Manager's Manual", Date: &manDate}
	if err := doc.GenManTree(root, hdr, tmp); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(tmp, e.Name()))
		if err != nil {
			return nil, err
		}
		files[filepath.Join("docs", "man", e.Name())] = b
	}
	for name, gen := range map[string]func(*cobra.Command, *bytes.Buffer) error{
		"sluice.bash": func(c *cobra.Command, b *bytes.Buffer) error { return c.GenBashCompletionV2(b, true) },
		"_sluice":     func(c *cobra.Command, b *bytes.Buffer) error { return c.GenZshCompletion(b) },
		"sluice.fish": func(c *cobra.Command, b *bytes.Buffer) error { return c.GenFishCompletion(b, true) },
	} {
		var b bytes.Buffer
		if err := gen(root, &b); err != nil {
			return nil, err
		}
		files[filepath.Join("packaging", "completion", name)] = b.Bytes()
	}
	return files, nil
}

// writeAll writes files under root and removes man pages of commands that
// are gone.
func writeAll(root string, files map[string][]byte) error {
	old, _ := filepath.Glob(filepath.Join(root, "docs", "man", "*.8"))
	for _, f := range old {
		rel, _ := filepath.Rel(root, f)
		if _, ok := files[rel]; !ok {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	for rel, b := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
