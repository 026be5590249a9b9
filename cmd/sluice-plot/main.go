// Command sluice-plot draws the charts of `sluice bench tunnel` and `sluice
// bench tls` from their JSON documents, as PNG and SVG:
//
//	sluice-plot [-o DIR] FILE.json...
//
// The charts go into DIR (default: each file's own directory). It is a
// command of its own so that the gateway's binary does not link the
// plotting library and its fonts; `sluice bench ... --plot DIR` runs it
// when it is installed next to sluice or on PATH (go install
// github.com/sluicegw/sluice/cmd/sluice-plot).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluicegw/sluice/bench/chart"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: sluice-plot [-o DIR] FILE.json...\n\n"+
			"Draws the charts of the JSON documents of sluice bench tunnel and sluice bench tls (--json) as PNG and SVG.\n\n")
		flag.PrintDefaults()
	}
	out := flag.String("o", "", "write the charts into `DIR` (default: each file's directory)")
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	code := 0
	for _, f := range flag.Args() {
		dir := *out
		if dir == "" {
			dir = filepath.Dir(f)
		}
		files, err := chart.File(dir, f)
		for _, w := range files {
			fmt.Println(w)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "sluice-plot: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
