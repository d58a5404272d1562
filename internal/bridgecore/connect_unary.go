package bridgecore

import (
	"fmt"
	"strconv"
	"time"
)

// ParseTimeout reads Connect-Timeout-Ms: 1 to 10 digits of milliseconds,
// as the Connect protocol has it (and connect-go reads it).
func ParseTimeout(v []string) (time.Duration, bool, error) {
	if len(v) == 0 {
		return 0, false, nil
	}
	t := v[0]
	if len(t) == 0 || len(t) > 10 {
		return 0, false, fmt.Errorf("%q is not 1 to 10 digits", t)
	}
	ms, err := strconv.ParseInt(t, 10, 64)
	switch {
	case err != nil:
		return 0, false, fmt.Errorf("%q is not a number of milliseconds", t)
	case ms < 0:
		return 0, false, fmt.Errorf("%q is negative", t)
	}
	return time.Duration(ms) * time.Millisecond, true, nil
}

// UnauthorizedPage answers a browser that came without the token.
const UnauthorizedPage = `<!doctype html><html lang="en"><meta charset="utf-8"><title>warren: token required</title>
<style>body{background:#0f1419;color:#e6edf3;font:16px/1.5 system-ui,sans-serif;display:grid;place-items:center;height:100vh;margin:0}
main{max-width:34em;padding:2em;border:1px solid #2a3440;border-radius:14px;background:#171d24}code{color:#4fc3a1}</style>
<main><h1>Token required</h1><p>This warren server accepts only callers that know its token.
Open the URL that <code>warren serve</code> printed (<code>http://HOST:PORT/?token=...</code>).</p></main></html>
`
