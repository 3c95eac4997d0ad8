package soak

import (
	"cmp"
	"fmt"
	"slices"
)

// faultKinds are the faults the soak injects, in the order of its report.
var faultKinds = []string{faultKill, faultTermPool, faultTermListen, faultPGCrashQuiet, faultPGCrash, faultRevokeWH, faultRevokePush,
	faultWH5xx, faultWHTimeout, faultWH410, faultPush5xx}

// checkFaults checks that every fault the run needs happened and had its
// effect, and tabulates each kind with what it did and the duplicate
// arrivals attributed to it. A fault that did not happen is the harness's
// failure, not bothy's: it hides the check of bothy's behaviour under it.
func (hi *history) checkFaults(dupsByCause map[string]map[string]int) *report {
	f := &report{}
	required := hi.requiredFaults()
	var rows [][]string
	for _, k := range faultKinds {
		c := hi.faults[k]
		hi.faultCoverage(f, k, c, slices.Contains(required, k))
		rows = append(rows, []string{k, itoa(c.n), hi.faultDetail(k, c.x, slices.Contains(required, k)),
			itoa(dupsByCause[k][chanWebhooks]), itoa(dupsByCause[k][chanPush])})
	}
	rows = append(rows, []string{noFault, "", "", itoa(dupsByCause[noFault][chanWebhooks]), itoa(dupsByCause[noFault][chanPush])})
	f.table("FAULTS (a duplicate arrival is attributed to the first kill, pool termination or crash after the accepted arrival)",
		"fault\tcount\tdetail\tdup arrivals webhooks\tdup arrivals push", rows)
	return f
}

// requiredFaults lists the faults this run must inject. The crashes are
// among them only when one is planned, and the crash amid all traffic is
// left out in short mode.
func (hi *history) requiredFaults() []string {
	required := []string{faultKill, faultTermPool, faultTermListen, faultRevokeWH, faultRevokePush,
		faultWH5xx, faultWHTimeout, faultWH410, faultPush5xx}
	if hi.crashSkipped == "" {
		required = append(required, faultPGCrashQuiet)
		if !hi.short {
			required = append(required, faultPGCrash)
		}
	}
	return required
}

// faultCoverage hides the check of bothy's behaviour under fault k when
// the fault did not happen as it must: required and never injected, every
// termination of its kind finding no backend (no worker held a connection
// of that kind for backendWait), or a receiver window in which no request
// came, so the receiver never answered with the fault.
func (hi *history) faultCoverage(f *report, k string, c faultCount, required bool) {
	answered, window := hi.windowAnswers(k)
	switch {
	case required && c.n == 0:
		f.hide(fmt.Sprintf("fault %q was never injected", k), underFault(k))
	case (k == faultTermPool || k == faultTermListen) && c.n > 0 && c.x == 0:
		f.hide(fmt.Sprintf("%s: no backend was found to terminate in %d attempts", k, c.n), underFault(k))
	case window && c.n > 0 && answered == 0:
		f.hide(fmt.Sprintf("fault %q: the receiver never answered with the fault (no request in the window)", k), underFault(k))
	}
}

// windowAnswers is how many requests the receiver of a window fault
// answered with the fault; false for the other kinds.
func (hi *history) windowAnswers(k string) (int64, bool) {
	var name string
	switch k {
	case faultWH5xx:
		name = "flaky-5xx"
	case faultWHTimeout:
		name = "slow-timeout"
	case faultWH410:
		name = "gone-410"
	case faultPush5xx:
		if d := hi.device("pu-flaky-phone"); d != nil {
			return d.faultResp, true
		}
		return 0, true
	default:
		return 0, false
	}
	if t := hi.target(name); t != nil {
		return t.faultResp, true
	}
	return 0, true
}

// faultDetail says what a fault did; x is the figure recorded with it
// (for terminations, the backends terminated). required says whether a
// crash was planned.
func (hi *history) faultDetail(k string, x int, required bool) string {
	switch k {
	case faultKill:
		jobs, next, _, _ := hi.takeoverFigures()
		return fmt.Sprintf("takeover p95 %s (%d jobs and claims), next healthy webhook 2xx p95 %s", fmtTook(percentile(jobs, .95)), len(jobs),
			fmtTook(percentile(next, .95)))
	case faultTermPool, faultTermListen:
		return fmt.Sprintf("%d backends", x)
	case faultPGCrashQuiet, faultPGCrash:
		return crashDetail(k, required, hi.crashSkipped, hi.crashes)
	case faultWHTimeout:
		n, _ := hi.windowAnswers(k)
		return fmt.Sprintf("%d requests held", n)
	}
	if n, ok := hi.windowAnswers(k); ok {
		return fmt.Sprintf("%d answers", n)
	}
	return ""
}

// crashDetail says what the crashes of kind k put at risk and lost, or why
// the run had none.
func crashDetail(k string, required bool, skipped string, crashes []crashResult) string {
	if !required {
		return "skipped (" + cmp.Or(skipped, "short mode") + ")"
	}
	var acked, missing, unread int
	for _, c := range crashes {
		switch {
		case c.kind != k:
		case c.missing < 0:
			unread++
		default:
			acked, missing = acked+c.acked, missing+c.missing
		}
	}
	detail := fmt.Sprintf("acknowledged: %d, missing after recovery: %d", acked, missing)
	if unread > 0 {
		detail += fmt.Sprintf(" (%d crashes not read back right after recovery: checked at the end only)", unread)
	}
	return detail
}
