package chart

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/sluicegw/sluice/bench/tlsbench"
	"github.com/sluicegw/sluice/bench/tunnel"
)

// File draws the charts of the JSON document in path (written by `sluice
// bench tunnel --json` or `sluice bench tls --json`) into dir, and returns
// the files written. A document without its "bench" field (an older run)
// is told by its results' fields.
func File(dir, path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("chart: %w", err)
	}
	var head struct {
		Bench   string                       `json:"bench"`
		Results []map[string]json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("chart: %s: not a bench document: %w", path, err)
	}
	kind := head.Bench
	if kind == "" && len(head.Results) > 0 {
		if _, ok := head.Results[0]["tunnels"]; ok {
			kind = tunnel.BenchName
		} else if _, ok := head.Results[0]["key"]; ok {
			kind = tlsbench.BenchName
		}
	}
	switch kind {
	case tunnel.BenchName:
		var doc tunnel.Document
		if err := json.Unmarshal(b, &doc); err != nil {
			return nil, fmt.Errorf("chart: %s: %w", path, err)
		}
		return Tunnel(dir, &doc)
	case tlsbench.BenchName:
		var doc tlsbench.Document
		if err := json.Unmarshal(b, &doc); err != nil {
			return nil, fmt.Errorf("chart: %s: %w", path, err)
		}
		return TLS(dir, &doc)
	}
	return nil, fmt.Errorf("chart: %s: not a document of bench tunnel or bench tls (they have charts; bench crypto and esp have none)", path)
}
