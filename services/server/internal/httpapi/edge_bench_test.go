package httpapi

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkCheckBodyText measures what the edge's body check costs a
// request of 100 events: a body the quick scan passes, and one whose
// escaped emoji (\ud83d\ude00) makes it walk every string.
func BenchmarkCheckBodyText(b *testing.B) {
	for _, tc := range []struct{ name, note string }{
		{"QuickScan", "a note of some length, as events carry"},
		{"Walk", `a note with an escaped emoji \ud83d\ude00`},
	} {
		var events []string
		for i := range 100 {
			events = append(events, fmt.Sprintf(`{"type":"item.created","data":{"n":%d,"note":"%s","tags":["a","b"]}}`, i, tc.note))
		}
		body := []byte(`{"events":[` + strings.Join(events, ",") + `]}`)
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest("POST", "/v1/spaces/s1/events", bytes.NewReader(body))
				if err := checkBodyText(httptest.NewRecorder(), r, 1<<20); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
