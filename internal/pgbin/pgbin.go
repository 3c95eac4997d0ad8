// Package pgbin finds the local PostgreSQL server binaries (initdb, pg_ctl)
// and pg_auto_failover's pg_autoctl: private clusters and formations run
// from them, and the tests that need them ask here whether they are
// installed. It sits at the module's root so that every package, the
// server's and the tests', can use it.
package pgbin

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Server returns the folder holding initdb and pg_ctl: the one pg_config
// names, else the newest /usr/lib/postgresql/*/bin, else the PATH's.
func Server() (string, error) {
	has := func(d string) bool {
		return fileExists(filepath.Join(d, "initdb")) && fileExists(filepath.Join(d, "pg_ctl"))
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if d := strings.TrimSpace(string(out)); has(d) {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return dirMajor(dirs[i]) > dirMajor(dirs[j]) })
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	return "", errors.New("initdb and pg_ctl not found (pg_config --bindir, /usr/lib/postgresql/*/bin, PATH)")
}

// Autoctl returns the pg_autoctl binary for the PostgreSQL whose server
// binaries are in bin, and an error naming the packages to install when it
// or the monitor's extension is missing.
func Autoctl(bin string) (string, error) {
	hint := "apt-get install -y --no-install-recommends " + strings.Join(AutoctlPackages(bin), " ")
	p, err := exec.LookPath("pg_autoctl")
	if err != nil {
		return "", fmt.Errorf("pg_autoctl not found in PATH: %s", hint)
	}
	if _, err := os.Stat(filepath.Join(shareDir(bin), "extension", "pgautofailover.control")); err != nil {
		return "", fmt.Errorf("the pgautofailover extension is not installed for the PostgreSQL in %s: %s", bin, hint)
	}
	return p, nil
}

// AutoctlPackages are the Debian packages of pg_autoctl and of the
// monitor's extension for the PostgreSQL in bin (its major version named
// NN when bin says none).
func AutoctlPackages(bin string) []string {
	major := "NN"
	if n := Major(bin); n > 0 {
		major = strconv.Itoa(n)
	}
	return []string{"pg-auto-failover-cli", "postgresql-" + major + "-auto-failover"}
}

// Major is the major version of the PostgreSQL in bin, from its pg_config
// or its Debian path (/usr/lib/postgresql/NN/bin); 0 when neither says.
func Major(bin string) int {
	if bin == "" {
		return 0
	}
	if out, err := exec.Command(filepath.Join(bin, "pg_config"), "--version").Output(); err == nil {
		// "PostgreSQL 15.10 (Debian 15.10-0+deb12u1)"
		fields := strings.Fields(string(out))
		if len(fields) > 1 {
			v, _, _ := strings.Cut(fields[1], ".")
			if n, err := strconv.Atoi(v); err == nil {
				return n
			}
		}
	}
	return dirMajor(bin)
}

// shareDir is the share folder of the PostgreSQL in bin.
func shareDir(bin string) string {
	if out, err := exec.Command(filepath.Join(bin, "pg_config"), "--sharedir").Output(); err == nil {
		return strings.TrimSpace(string(out))
	}
	return filepath.Join(filepath.Dir(filepath.Dir(bin)), "share")
}

func dirMajor(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
