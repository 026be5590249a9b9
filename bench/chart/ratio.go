package chart

import (
	"strconv"
	"strings"
)

// ratio is one target ratio of a run, whichever bench made it.
type ratio struct {
	cat             string // the target (and its size, tunnels, version)
	system, variant string // the series: the system measured and its variant
	value           float64
	want            string // ">= 1.5" or "<= 1"
}

// bound parses a target's want into its direction and bound.
func bound(want string) (Better, float64, bool) {
	f := strings.Fields(want)
	if len(f) != 2 {
		return Higher, 0, false
	}
	v, err := strconv.ParseFloat(f[1], 64)
	if err != nil {
		return Higher, 0, false
	}
	switch f[0] {
	case ">=":
		return Higher, v, true
	case "<=":
		return Lower, v, true
	}
	return Higher, 0, false
}

// ratioCharts draws the ratios as two bar charts, ratios-higher (targets
// with a lower bound) and ratios-lower (targets with an upper bound), with
// each target's bound dashed across its group.
// The titles name what the ratios are (what) and the value axes any ratio
// of another kind (higherNote, lowerNote).
func ratioCharts(dir, what, higherNote, lowerNote string, rs []ratio, pal *palette) ([]string, error) {
	var files []string
	for _, b := range []Better{Higher, Lower} {
		var cats []string
		var ss []series
		idx := map[string]int{}
		for _, r := range rs {
			rb, bv, ok := bound(r.want)
			if !ok || rb != b || r.value <= 0 {
				continue
			}
			ci := indexOrAdd(&cats, r.cat)
			i, ok := idx[r.variant]
			if !ok {
				i = len(ss)
				idx[r.variant] = i
				ss = append(ss, series{name: r.variant, system: r.system, variant: r.variant, color: pal.color(r.system, r.variant)})
			}
			ss[i].pts = append(ss[i].pts, point{cat: ci, v: r.value, lo: r.value, hi: r.value, bound: bv})
		}
		if len(ss) == 0 {
			continue
		}
		pal.sortSeries(ss)
		name, title, ylabel := "ratios-higher", "Targets met at or above their bound: "+what, "ratio"+higherNote
		if b == Lower {
			name, title, ylabel = "ratios-lower", "Targets met at or below their bound: "+what, "ratio"+lowerNote
		}
		// Bars grow from 1 (as good as the other system), up or down.
		p, leg := barChart(title, b, ylabel, cats, ss, 1)
		fs, err := saveAll(dir, name, p, leg)
		files = append(files, fs...)
		if err != nil {
			return files, err
		}
	}
	return files, nil
}

// indexOrAdd returns the index of s in *list, appending it if need be.
func indexOrAdd(list *[]string, s string) int {
	for i, x := range *list {
		if x == s {
			return i
		}
	}
	*list = append(*list, s)
	return len(*list) - 1
}
