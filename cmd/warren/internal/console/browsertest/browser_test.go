package browsertest_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	browser "github.com/warrenmq/warren/cmd/warren/internal/console/browsertest"
)

// The browser loads a page, runs its script and submits its form.
func TestBrowserSubmitsAForm(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8") // "<form" alone sniffs as text/plain
		if r.Method == http.MethodPost {
			got <- r.FormValue("word")
			fmt.Fprint(w, `<p id="done">thanks</p>`)
			return
		}
		fmt.Fprint(w, `<form method="post"><input id="word" name="word"><button id="go">go</button></form>
<script>document.getElementById("word").value = "from-script";</script>`)
	}))
	defer srv.Close()

	ctx := browser.New(t, time.Minute)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL), chromedp.Click(chromedp.ID("go"))); err != nil {
		t.Fatal(err)
	}
	done, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("done")))
	if err != nil {
		t.Fatal(err)
	}
	if w := <-got; w != "from-script" || done != "thanks" {
		t.Fatalf("posted %q, page says %q", w, done)
	}
}
