package ikebench

// A responder's CPU time and resident memory from /proc: the process and
// its descendants (charon runs under unshare and sh, which exec it).

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the unit of /proc/PID/stat's CPU times (USER_HZ).
const clockTicks = 100

// usage is a process tree's CPU time and resident memory.
type usage struct {
	CPU    time.Duration // utime + stime
	RSSKiB int64         // VmRSS
}

// treeUsage sums the usage of pid and every process below it.
func treeUsage(pid int) (usage, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return usage{}, err
	}
	parent := map[int]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		if pp, _, err := parseStat(b); err == nil {
			parent[p] = pp
		}
	}
	in := func(p int) bool {
		for d := 0; p > 1 && d < 64; d++ {
			if p == pid {
				return true
			}
			p = parent[p]
		}
		return false
	}
	var u usage
	found := false
	for p := range parent {
		if !in(p) {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		_, cpu, err := parseStat(b)
		if err != nil {
			continue
		}
		found = true
		u.CPU += cpu
		u.RSSKiB += readRSS(p)
	}
	if !found {
		return u, fmt.Errorf("ikebench: no process %d", pid)
	}
	return u, nil
}

// parseStat reads the parent pid (field 4) and utime+stime (14, 15) of a
// /proc/PID/stat line, counting fields after the last ')' since the name
// may hold anything.
func parseStat(b []byte) (ppid int, cpu time.Duration, err error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errors.New("ikebench: /proc/PID/stat: no ')'")
	}
	fs := bytes.Fields(b[i+1:])
	if len(fs) < 13 {
		return 0, 0, fmt.Errorf("ikebench: /proc/PID/stat: %d fields after the name", len(fs))
	}
	ppid, err0 := strconv.Atoi(string(fs[1]))
	ut, err1 := strconv.ParseUint(string(fs[11]), 10, 64)
	st, err2 := strconv.ParseUint(string(fs[12]), 10, 64)
	if err := errors.Join(err0, err1, err2); err != nil {
		return 0, 0, fmt.Errorf("ikebench: /proc/PID/stat: %w", err)
	}
	return ppid, time.Duration(ut+st) * time.Second / clockTicks, nil
}

// readRSS is VmRSS of pid in KiB (0 if unknown).
func readRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}
