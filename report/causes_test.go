package report

import "testing"

// The summary names the top causes of failure in words, most frequent
// first, short enough for a table cell.
func TestTopCauses(t *testing.T) {
	for _, tc := range []struct {
		errs map[string]int
		want string
	}{
		{nil, ""},
		{map[string]int{"sse: event too large": 3}, `; "sse: event too large" ×3`},
		{map[string]int{
			"answer is not JSON: <html><body>\n  Bad | gateway</body></html> and a long tail of markup that goes on": 2,
			"sse: event too large":     5,
			"stream ended early":       1,
			"connection reset by peer": 1,
		}, `; "sse: event too large" ×5, "answer is not JSON: <html><body> Bad \| gateway</body></html…" ×2, "connection reset by peer" ×1`},
	} {
		if got := topCauses(tc.errs); got != tc.want {
			t.Errorf("topCauses(%v) =\n%s\nwant\n%s", tc.errs, got, tc.want)
		}
	}
}
