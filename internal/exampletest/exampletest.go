// Package exampletest reads the commented parts of the files in
// examples/ for the tests that check them: what an operator gets by
// uncommenting a block.
package exampletest

import (
	"fmt"
	"os"
	"strings"
)

// RoadWarriors returns the road-warrior block of examples/ike-gateway.toml
// at path (the lines between "# BEGIN road warriors" and "# END road
// warriors", from its first "# [[pool]]"), uncommented: each line without
// its first "#" and the space after it.
func RoadWarriors(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	_, block, ok := strings.Cut(string(data), "# BEGIN road warriors\n")
	block, _, ok2 := strings.Cut(block, "# END road warriors")
	_, block, ok3 := strings.Cut(block, "#\n# [[pool]]")
	if !ok || !ok2 || !ok3 {
		return "", fmt.Errorf("exampletest: %s has no road-warrior block", path)
	}
	var b strings.Builder
	b.WriteString("[[pool]]")
	for _, line := range strings.Split(block, "\n") {
		b.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "#"), " ") + "\n")
	}
	return b.String(), nil
}

// Replace returns the text of the example at path with its road-warrior
// block uncommented in place.
func Replace(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	rw, err := RoadWarriors(path)
	if err != nil {
		return "", err
	}
	head, rest, _ := strings.Cut(string(data), "# BEGIN road warriors\n")
	_, tail, _ := strings.Cut(rest, "# END road warriors")
	return head + rw + tail, nil
}
