package soak

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
)

// report is the verified outcome of a run: its tables, the product
// violations, and the harness errors. A violation is bothy breaking a
// promise; a harness error is the soak failing at something of its own (a
// fault it could not inject, a query of its own that failed), which fails
// the run only when it hides a check.
type report struct {
	sections   []string
	violations []violation
	harness    []harnessError
}

// violation is one product check that failed.
type violation struct {
	check string // one of the check* names
	text  string
}

// harnessError is a problem of the soak itself. hides names the checks it
// left without the data or the fault they need; empty when every check
// still ran.
type harnessError struct {
	text  string
	hides []string
}

func (r *report) fail(check, format string, args ...any) {
	r.violations = append(r.violations, violation{check: check, text: fmt.Sprintf(format, args...)})
}

// hide records that checks could not run, and why.
func (r *report) hide(why string, checks ...string) {
	r.harness = append(r.harness, harnessError{text: why, hides: checks})
}

func (r *report) table(title string, header string, rows [][]string) {
	var b strings.Builder
	b.WriteString(title + "\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, header+"\t")
	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	tw.Flush()
	r.sections = append(r.sections, b.String())
}

// add appends the findings of one check: its sections, violations and
// harness errors.
func (r *report) add(f *report) {
	r.sections = append(r.sections, f.sections...)
	r.violations = append(r.violations, f.violations...)
	r.harness = append(r.harness, f.harness...)
}

// hidden lists every check a harness error hid, once, in the order met.
func (r *report) hidden() []string {
	var out []string
	for _, e := range r.harness {
		for _, c := range e.hides {
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	return out
}

// failedChecks lists the checks with a violation, once each, in the order
// met.
func (r *report) failedChecks() []string {
	var out []string
	for _, v := range r.violations {
		if !slices.Contains(out, v.check) {
			out = append(out, v.check)
		}
	}
	return out
}

// passed reports whether the run proves what it set out to: no violation,
// and no check hidden by a harness error.
func (r *report) passed() bool { return len(r.violations) == 0 && len(r.hidden()) == 0 }

func (r *report) String() string {
	var b strings.Builder
	b.WriteString("\n")
	for _, s := range r.sections {
		b.WriteString(s + "\n")
	}
	fmt.Fprintf(&b, "PRODUCT VIOLATIONS: %d\n", len(r.violations))
	for i, v := range r.violations {
		if i == 40 {
			fmt.Fprintf(&b, "  ... and %d more\n", len(r.violations)-40)
			break
		}
		fmt.Fprintf(&b, "  - [%s] %s\n", v.check, v.text)
	}
	hidden := r.hidden()
	fmt.Fprintf(&b, "HARNESS ERRORS (the soak's own, not bothy's): %d; checks they hid: %d\n", len(r.harness), len(hidden))
	for _, e := range r.harness {
		hides := "hides no check"
		if len(e.hides) > 0 {
			hides = "HIDES: " + strings.Join(e.hides, "; ")
		}
		fmt.Fprintf(&b, "  - %s (%s)\n", firstLine(e.text), hides)
	}
	switch {
	case r.passed():
		b.WriteString("PASS: every committed event became exactly one job per consumer and target, every acknowledged event survived, nothing lost\n")
	case len(r.violations) == 0:
		fmt.Fprintf(&b, "FAIL: no product violation, but the run did not check: %s\n", strings.Join(hidden, "; "))
	default:
		b.WriteString("FAIL\n")
	}
	return b.String()
}

func itoa[T ~int | ~int64](n T) string { return fmt.Sprint(n) }

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
