package localrabbit

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// evalLoop is the program of the node's eval session: a hidden Erlang
// node that reads one call per line on standard input ("<tag> <the
// expressions, base64>"), evaluates the expressions on the RabbitMQ node
// over Erlang distribution and prints "<tag> {ok,Value}" or "<tag>
// {error,Why}" on one line. The tag pairs a reply with its call: what the
// expressions print themselves (rpc:call sends a remote io:format to the
// caller) reaches the same standard output, untagged. Base64 carries the
// expressions byte for byte: white space, comments and UTF-8 as written.
//
// Why a session and not rabbitmqctl: each rabbitmqctl call boots an Erlang
// VM and the CLI's Elixir code, about 0.8 s of CPU, which on a loaded
// 2-core machine stretched to 9 s a call; the users lane of the consumer's
// tests spent 2 of its 2.5 minutes starting rabbitmqctl. The session boots
// once per node and answers in milliseconds.
const evalLoop = `Node = list_to_atom(os:getenv("WARREN_EVAL_NODE")),
Loop = fun Loop() ->
    case io:get_line('') of
        eof -> halt(0);
        {error, _} -> halt(1);
        Line ->
            [Tag, Encoded] = string:split(string:trim(Line), " "),
            Reply = try
                Text = unicode:characters_to_list(base64:decode(Encoded), utf8),
                {ok, Tokens, _} = erl_scan:string(Text),
                {ok, Exprs} = erl_parse:parse_exprs(Tokens),
                case rpc:call(Node, erl_eval, exprs, [Exprs, []], 60000) of
                    {value, Value, _} -> {ok, Value};
                    Other -> {error, Other}
                end
            catch Class:Reason -> {error, {Class, Reason}}
            end,
            io:format("~s ~w~n", [Tag, Reply]),
            Loop()
    end
end,
Loop().`

// evalSession is a running eval session; nil until the first Eval.
type evalSession struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan string // the session's standard output, closed when it ends
	exited chan struct{}
	calls  int // calls made, for the tags
}

// evalSessions counts the sessions started, for unique Erlang node names.
var evalSessions struct {
	mu sync.Mutex
	n  int
}

// Eval evaluates expr, a sequence of Erlang expressions ending with a
// period, on the node and returns the value of the last one as Erlang's
// ~w prints it. An expression that raises, or a node that cannot be
// reached, is an error carrying what Erlang said.
//
// Eval is what rabbitmqctl eval does, without starting a VM per call: the
// first call starts the node's eval session, the later ones reuse it.
// Calls on one node run one after another. A call whose ctx ends first
// returns ctx's error, but what it started on the node may still happen:
// the session is ended, not the evaluation. The expressions reach into
// RabbitMQ's own modules, so they hold for the versions the tests run on
// (3.10 to 4.x), not forever: a call that stops working fails its test
// with Erlang's error.
func (n *Node) Eval(ctx context.Context, expr string) (string, error) {
	if !strings.HasPrefix(n.Name, namePrefix) {
		panic("localrabbit: refusing eval against node " + n.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	select { // the session's lock, given up if ctx ends first
	case n.evalLock <- struct{}{}:
		defer func() { <-n.evalLock }()
	case <-ctx.Done():
		return "", fmt.Errorf("eval %s on %s: %w", expr, n.Name, ctx.Err())
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("eval %s on %s: %w", expr, n.Name, err)
	}
	s, err := n.evalSession()
	if err != nil {
		return "", err
	}
	s.calls++
	tag := "warren-eval-" + strconv.Itoa(s.calls)
	if _, err := io.WriteString(s.in, tag+" "+base64.StdEncoding.EncodeToString([]byte(expr))+"\n"); err != nil {
		n.stopEval()
		return "", fmt.Errorf("eval %s on %s: the session is gone: %w", expr, n.Name, err)
	}
	for {
		select {
		case line, ok := <-s.lines:
			if !ok {
				n.stopEval()
				return "", fmt.Errorf("eval %s on %s: the session ended", expr, n.Name)
			}
			reply, ours := strings.CutPrefix(line, tag+" ")
			if !ours {
				continue // printed by the expressions, or a late reply
			}
			if v, ok := strings.CutPrefix(reply, "{ok,"); ok {
				return strings.TrimSuffix(v, "}"), nil
			}
			return "", fmt.Errorf("eval %s on %s: %s", expr, n.Name, reply)
		case <-ctx.Done():
			// The reply may still come; a session that is ended cannot
			// pair it with a later call.
			n.stopEval()
			return "", fmt.Errorf("eval %s on %s: %w", expr, n.Name, ctx.Err())
		}
	}
}

// evalSession returns the node's running eval session, starting one if
// none runs. The caller holds the session's lock.
func (n *Node) evalSession() (*evalSession, error) {
	if n.evalStopped {
		return nil, fmt.Errorf("eval on %s: the node was stopped", n.Name)
	}
	if s := n.eval; s != nil {
		select {
		case <-s.exited:
			n.stopEval()
		default:
			return s, nil
		}
	}
	evalSessions.mu.Lock()
	evalSessions.n++
	name := fmt.Sprintf("%seval_%d_%d@localhost", namePrefix, os.Getpid(), evalSessions.n)
	evalSessions.mu.Unlock()
	erl, err := exec.LookPath("erl")
	if err != nil {
		return nil, fmt.Errorf("erl not found (%s installs RabbitMQ and Erlang): %w", StartCommand, err)
	}
	cmd := exec.Command(erl, "-sname", name, "-hidden", "-noshell",
		// Distribution on loopback only, like the node's own.
		"-kernel", "inet_dist_use_interface", "{127,0,0,1}",
		"-eval", evalLoop)
	// HOME is the node's directory, so the session reads the node's
	// cookie and no other.
	cmd.Dir, cmd.Env = n.Dir, append(n.env, "WARREN_EVAL_NODE="+n.Name)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr // a session that cannot start says why
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the eval session: %w", err)
	}
	s := &evalSession{cmd: cmd, in: in, lines: make(chan string), exited: make(chan struct{})}
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 64<<20)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		cmd.Process.Kill() // a line over the buffer: the session is of no use
	}()
	go func() {
		cmd.Wait()
		close(s.exited)
	}()
	n.eval = s
	return s, nil
}

// stopEval ends the node's eval session, if one runs, and waits for it.
// The caller holds the session's lock.
func (n *Node) stopEval() {
	s := n.eval
	if s == nil {
		return
	}
	n.eval = nil
	s.in.Close() // an idle session halts at the end of its input
	s.cmd.Process.Kill()
	for range s.lines { // let the reader end
	}
	<-s.exited
}

// closeEval ends the node's eval session for Stop: later calls fail
// until the node starts again. It waits for a call in flight.
func (n *Node) closeEval() {
	n.evalLock <- struct{}{}
	defer func() { <-n.evalLock }()
	n.evalStopped = true
	n.stopEval()
}

// erlBinary is s as an Erlang binary literal of its bytes, which needs no
// quoting whatever s holds (regular expressions, quotes, backslashes).
func erlBinary(s string) string {
	parts := make([]string, len(s))
	for i := range len(s) {
		parts[i] = strconv.Itoa(int(s[i]))
	}
	return "<<" + strings.Join(parts, ",") + ">>"
}

// evalExpect is Eval, failing unless the value is want.
func (n *Node) evalExpect(ctx context.Context, want, expr string) error {
	got, err := n.Eval(ctx, expr)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("eval %s on %s: got %s, want %s", expr, n.Name, got, want)
	}
	return nil
}

// SetEnv sets one of the rabbit application's settings on the running
// node (application:set_env), as rabbitmq.conf would at boot: the ones
// read when a connection or channel opens, such as max_message_size and
// frame_max, take effect for the next one.
func (n *Node) SetEnv(ctx context.Context, key string, value int) error {
	return n.evalExpect(ctx, "ok", fmt.Sprintf("application:set_env(rabbit, %s, %d).", key, value))
}
