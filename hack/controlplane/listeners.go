package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// listenerGroups returns the process groups of the processes that hold a TCP
// listening socket on port (IPv4 and IPv6), read from /proc. known is false when
// /proc cannot say (not Linux, or not readable): the caller must then assume the
// worst.
func listenerGroups(port int) (groups []int, known bool) {
	inodes := map[string]bool{}
	read := false
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		found, err := listeningInodes(table, port)
		if err != nil {
			continue
		}
		read = true
		for _, inode := range found {
			inodes[inode] = true
		}
	}
	if !read {
		return nil, false
	}
	if len(inodes) == 0 {
		return nil, true
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, false
	}
	seen := map[int]bool{}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || !holdsSocket(pid, inodes) {
			continue
		}
		if pgid, ok := processGroup(pid); ok && !seen[pgid] {
			seen[pgid] = true
			groups = append(groups, pgid)
		}
	}
	// A socket whose holder this process may not read (another user's): unknown.
	return groups, len(groups) > 0
}

// listeningInodes reads a /proc/net/tcp{,6} table: the socket inodes in state
// LISTEN (0A) on the local port.
func listeningInodes(table string, port int) ([]string, error) {
	f, err := os.Open(table)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	want := fmt.Sprintf(":%04X", port)
	var inodes []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		if len(fields) < 10 || fields[3] != "0A" || !strings.HasSuffix(fields[1], want) {
			continue
		}
		inodes = append(inodes, fields[9])
	}
	return inodes, sc.Err()
}

func holdsSocket(pid int, inodes map[string]bool) bool {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(dir, fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") &&
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
			return true
		}
	}
	return false
}

// processGroup is field 5 (pgrp) of /proc/PID/stat; the command name (field 2) is
// in parentheses and may hold spaces, so the fields are counted after its ')'.
func processGroup(pid int) (int, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, false
	}
	s := string(b)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0, false
	}
	fields := strings.Fields(s[end+1:])
	if len(fields) < 3 {
		return 0, false
	}
	pgid, err := strconv.Atoi(fields[2])
	return pgid, err == nil
}
