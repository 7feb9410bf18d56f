package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/contract"
	"github.com/warrenmq/warren/internal/testenv"
)

type itemUpdated struct {
	Name string `json:"name"`
}

type invoicePaid struct {
	Amount int `json:"amount"`
}

// contractsDir writes the test's contracts as a service keeps them.
func contractsDir(t *testing.T) string {
	t.Helper()
	set, err := contract.NewSet(
		contract.MustOf[itemUpdated]("workitem.updated", "1.0"),
		contract.MustOf[invoicePaid]("invoice.paid", "1.0"),
	)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := set.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// callWarren runs a command line in process.
func callWarren(env map[string]string, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), &cliEnv{stdout: &out, stderr: &errOut, getenv: func(k string) string { return env[k] }}, args)
	return code, out.String(), errOut.String()
}

// asyncapiDoc decodes a document and checks it against the official
// AsyncAPI 3.0.0 JSON Schema (contract/asyncapi/testdata says where it
// comes from).
func asyncapiDoc(t *testing.T, doc string) map[string]any {
	t.Helper()
	f, err := os.Open("../../contract/asyncapi/testdata/asyncapi-3.0.0.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	spec, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	const loc = "http://asyncapi.com/definitions/3.0.0/asyncapi.json"
	if err := c.AddResource(loc, spec); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(loc)
	if err != nil {
		t.Fatal(err)
	}
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
	if err != nil {
		t.Fatalf("not JSON: %v\n%s", err, doc)
	}
	if err := sch.Validate(v); err != nil {
		t.Fatalf("not valid AsyncAPI 3.0.0: %v\n%s", err, doc)
	}
	var d map[string]any
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// receives lists the message keys a receive operation takes.
func receives(t *testing.T, d map[string]any, queue string) string {
	t.Helper()
	op, ok := d["operations"].(map[string]any)["receive."+queue].(map[string]any)
	if !ok {
		t.Fatalf("no operation receive.%s: %v", queue, d["operations"])
	}
	var ids []string
	for _, m := range op["messages"].([]any) {
		r := m.(map[string]any)["$ref"].(string)
		ids = append(ids, r[strings.LastIndex(r, "/")+1:])
	}
	return strings.Join(ids, " ")
}

// Offline, from --consumer flags: the document is written to standard
// output or, whole, to --output, the same bytes each time.
func TestContractsAsyncAPIOffline(t *testing.T) {
	t.Parallel()
	dir := contractsDir(t)
	args := []string{"contracts", "asyncapi", "--contracts", dir, "--consumer", "webhook=workitem.,project.", "--consumer", "automation"}
	code, out, errOut := callWarren(nil, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	d := asyncapiDoc(t, out)
	if got := receives(t, d, "webhook"); got != "workitem.updated.v1.0" {
		t.Errorf("webhook receives %q", got)
	}
	if got := receives(t, d, "automation"); got != "invoice.paid.v1.0 workitem.updated.v1.0" {
		t.Errorf("automation receives %q", got)
	}
	if desc := d["operations"].(map[string]any)["receive.automation"].(map[string]any)["description"].(string); !strings.Contains(desc, "take every event type") {
		t.Errorf("--consumer automation (every type) is described as %q", desc)
	}
	_, again, _ := callWarren(nil, args...)
	if again != out {
		t.Errorf("two runs wrote different documents")
	}
	file := filepath.Join(t.TempDir(), "asyncapi.json")
	if code, _, errOut := callWarren(nil, append(args, "--output", file)...); code != 0 || !strings.Contains(errOut, "wrote "+file+": 2 contracts, 2 consumers") {
		t.Fatalf("--output: exit %d: %s", code, errOut)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != out {
		t.Fatalf("--output wrote other bytes than standard output (%v)", err)
	}
	// A run that fails leaves the file as it was.
	broken := t.TempDir()
	os.MkdirAll(filepath.Join(broken, "x.y"), 0o755)
	os.WriteFile(filepath.Join(broken, "x.y", "1.0.json"), []byte(`{"type": "object", "properties": {"a": {"type": "strung"}}}`), 0o644)
	if code, _, errOut := callWarren(nil, "contracts", "asyncapi", "--contracts", broken, "--consumer", "a", "--output", file); code != 1 || !strings.Contains(errOut, "x.y@1.0") {
		t.Fatalf("a broken contract: exit %d: %s", code, errOut)
	}
	if b, _ := os.ReadFile(file); string(b) != out {
		t.Fatalf("a failed run changed the document")
	}
}

// A wrong command line is exit 2 and says what is wrong; contracts that
// cannot be read or placed are exit 1, naming the contract.
func TestContractsAsyncAPIRefuses(t *testing.T) {
	t.Parallel()
	dir := contractsDir(t)
	unportable := t.TempDir()
	os.MkdirAll(filepath.Join(unportable, "a.b"), 0o755)
	os.WriteFile(filepath.Join(unportable, "a.b", "1.0.json"), []byte(`{"type": "array", "prefixItems": [{"type": "string"}]}`), 0o644)
	notJSON := t.TempDir()
	os.MkdirAll(filepath.Join(notJSON, "a.b"), 0o755)
	os.WriteFile(filepath.Join(notJSON, "a.b", "1.0.json"), []byte(`{"type": `), 0o644)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--consumer", "a"}, 2, "--contracts DIR is required"},
		{[]string{"--contracts", dir}, 2, "no consumers"},
		{[]string{"--contracts", dir, "--consumer", "a", "--consumer", "a=x."}, 2, `the consumer "a" is given twice`},
		{[]string{"--contracts", dir, "--consumer", "a=x.,,y."}, 2, "an empty prefix"},
		{[]string{"--contracts", dir, "--consumer", "=x."}, 2, "the name is empty"},
		{[]string{"--contracts", dir, "--consumer", "a", "--management-url", "http://127.0.0.1:1/"}, 2, "add --broker"},
		{[]string{"--contracts", dir, "--consumer", "a", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--contracts", dir, "--consumer", "a", "--exchange", ""}, 2, "--exchange is empty"},
		{[]string{"--contracts", dir + "/missing", "--consumer", "a"}, 1, "the contracts"},
		{[]string{"--contracts", unportable, "--consumer", "a"}, 1, "contract a.b@1.0: at /prefixItems"},
		{[]string{"--contracts", notJSON, "--consumer", "a"}, 1, "a.b@1.0"},
		{[]string{"--contracts", dir, "--consumer", strings.Repeat("q", 256)}, 1, "more than the 255 AMQP allows"},
		{[]string{"--contracts", dir, "--broker", "--amqp-url", "http://x"}, 2, "--amqp-url"},
	} {
		code, out, errOut := callWarren(nil, append([]string{"contracts", "asyncapi"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) || out != "" {
			t.Errorf("%v: exit %d, stdout %d bytes, stderr %s; want exit %d and %q", c.args, code, len(out), errOut, c.code, c.want)
		}
	}
}

// The partition exchange and queue names the command recognises are the
// consumer's.
func TestPartitionNamesAreTheConsumers(t *testing.T) {
	t.Parallel()
	if partitionExchange("sync") != consumer.PartitionExchangeName("sync") || consumer.PartitionQueueName("sync", 3) != "sync.p3" {
		t.Fatal("the command's partition names are not the consumer package's")
	}
}

// From a real broker: a warren consumer's queue bound to the fanout
// exchange, a topic exchange behind it routing invoice.# to another
// queue, a partitioned consumer behind its consistent-hash exchange, and
// a queue of nobody's bound to nothing. The document, read through the
// management API, has each consumer with what reaches its queues, is
// valid AsyncAPI 3.0.0, and a --consumer the broker does not have is an
// error.
func TestContractsAsyncAPIFromTheBroker(t *testing.T) {
	t.Parallel()
	testenv.RequireManagement(t)
	x := testenv.Name(t, "aa")
	webhook, billing, router, sync, unbound := x+".webhook", x+".billing", x+".router", x+".sync", x+".unbound"
	syncX := consumer.PartitionExchangeName(sync)
	p0, p1 := consumer.PartitionQueueName(sync, 0), consumer.PartitionQueueName(sync, 1)
	testenv.CleanupQueues(t, webhook, billing, p0, p1, unbound)
	testenv.CleanupExchanges(t, x, router, syncX)
	ch := testenv.Channel(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ch.ExchangeDeclare(x, amqp.ExchangeFanout, true, false, false, false, nil))
	must(ch.ExchangeDeclare(router, amqp.ExchangeTopic, true, false, false, false, nil))
	must(ch.ExchangeDeclare(syncX, "x-consistent-hash", true, false, false, false, nil))
	for _, q := range []string{webhook, billing, p0, p1, unbound} {
		_, err := ch.QueueDeclare(q, true, false, false, false, nil)
		must(err)
	}
	must(ch.QueueBind(webhook, "", x, false, nil))
	must(ch.ExchangeBind(router, "", x, false, nil))
	must(ch.QueueBind(billing, "invoice.#", router, false, nil))
	must(ch.ExchangeBind(syncX, "", x, false, nil))
	must(ch.QueueBind(p0, "1", syncX, false, nil))
	must(ch.QueueBind(p1, "1", syncX, false, nil))
	// A tool's queue: exclusive to the test's connection, auto-deleted,
	// and so gone with it.
	tool := x + ".tool"
	_, err := ch.QueueDeclare(tool, false, true, true, false, nil)
	must(err)
	must(ch.QueueBind(tool, "", x, false, nil))

	env := map[string]string{"AMQP_URL": testenv.AMQPURL(t)}
	dir := contractsDir(t)
	code, out, errOut := callWarren(env, "contracts", "asyncapi", "--contracts", dir, "--broker", "--exchange", x, "--consumer", webhook+"=workitem.")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "vhost /, exchange "+x) || strings.Contains(errOut, "guest:guest") {
		t.Errorf("stderr does not name what it read, or shows the password: %s", errOut)
	}
	d := asyncapiDoc(t, out)
	channels := d["channels"].(map[string]any)
	var queues []string
	for k := range channels {
		if q, ok := strings.CutPrefix(k, "queue."); ok {
			queues = append(queues, q)
		}
	}
	if got, want := strings.Join(slices.Sorted(slices.Values(queues)), " "), strings.Join(slices.Sorted(slices.Values([]string{webhook, billing, p0, p1, tool})), " "); got != want {
		t.Fatalf("queues %s, want %s", got, want)
	}
	if got := receives(t, d, webhook); got != "workitem.updated.v1.0" {
		t.Errorf("webhook receives %q", got)
	}
	if got := receives(t, d, billing); got != "invoice.paid.v1.0" {
		t.Errorf("billing receives %q (its binding lets invoice.# through)", got)
	}
	if n := len(channels["queue."+billing].(map[string]any)["messages"].(map[string]any)); n != 1 {
		t.Errorf("billing's channel has %d messages; only invoice.paid reaches it", n)
	}
	for _, p := range []string{p0, p1} {
		op := d["operations"].(map[string]any)["receive."+p].(map[string]any)
		if op["title"] != "Consumer "+sync {
			t.Errorf("%s is read by %v, want the partitioned consumer %s", p, op["title"], sync)
		}
	}
	tq := channels["queue."+tool].(map[string]any)
	if qb := tq["bindings"].(map[string]any)["amqp"].(map[string]any)["queue"].(map[string]any); qb["durable"] != false || qb["exclusive"] != true || qb["autoDelete"] != true ||
		!strings.Contains(tq["description"].(string), "exclusive to the connection") {
		t.Errorf("the tool's exclusive queue is described as %v: %s", qb, tq["description"])
	}
	if qb := channels["queue."+webhook].(map[string]any)["bindings"].(map[string]any)["amqp"].(map[string]any)["queue"].(map[string]any); qb["durable"] != true || qb["exclusive"] != false {
		t.Errorf("the webhook's queue is described as %v", qb)
	}
	xb := channels["exchange."+x].(map[string]any)["bindings"].(map[string]any)["amqp"].(map[string]any)["exchange"].(map[string]any)
	if xb["name"] != x || xb["type"] != "fanout" {
		t.Errorf("the exchange's binding: %v", xb)
	}

	code, _, errOut = callWarren(env, "contracts", "asyncapi", "--contracts", dir, "--broker", "--exchange", x, "--consumer", "nobody=x.")
	if code != 1 || !strings.Contains(errOut, `no queue of a consumer "nobody" is bound`) || !strings.Contains(errOut, webhook) {
		t.Errorf("a consumer the broker does not have: exit %d: %s", code, errOut)
	}
	code, _, errOut = callWarren(env, "contracts", "asyncapi", "--contracts", dir, "--broker", "--exchange", x+".missing")
	if code != 1 || !strings.Contains(errOut, "no exchange") {
		t.Errorf("an exchange the broker does not have: exit %d: %s", code, errOut)
	}
	wrong := strings.Replace(env["AMQP_URL"], "guest:guest", "guest:s3cret-wrong", 1)
	code, _, errOut = callWarren(map[string]string{"AMQP_URL": wrong}, "contracts", "asyncapi", "--contracts", dir, "--broker", "--exchange", x)
	if wrong != env["AMQP_URL"] && (code != 1 || !strings.Contains(errOut, "refused the credentials") || strings.Contains(errOut, "s3cret")) {
		t.Errorf("a wrong password: exit %d: %s", code, errOut)
	}
	code, _, errOut = callWarren(env, "contracts", "asyncapi", "--contracts", dir, "--broker", "--exchange", x, "--management-url", "http://127.0.0.1:1/")
	if code != 1 || !strings.Contains(errOut, "did not answer") {
		t.Errorf("a management API that is down: exit %d: %s", code, errOut)
	}
}
