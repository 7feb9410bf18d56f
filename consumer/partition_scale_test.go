package consumer_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

// runPartitionReplica is one replica of TestPartitionsScaleOut, run as a
// process of its own so that the test can SIGKILL it. For each event it
// handles it pushes "seq:replica:partition" to the entity's Redis list
// (Redis runs one command at a time, so the list is the order in which
// the replicas handled the entity's events), then returns nil, which acks.
func runPartitionReplica() int {
	replica := os.Getenv("WARREN_PARTITION_REPLICA")
	prefix := os.Getenv("REDIS_PREFIX")
	work, _ := time.ParseDuration(os.Getenv("WORK"))
	opts, err := goredis.ParseURL(os.Getenv("REDIS_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	rdb := goredis.NewClient(opts)
	defer rdb.Close()
	c, err := consumer.New(consumer.Config{
		URL:        os.Getenv("AMQP_URL"),
		Name:       os.Getenv("WARREN_QUEUE"),
		Exchange:   os.Getenv("WARREN_EXCHANGE"),
		QueueType:  consumer.QueueType(os.Getenv("QUEUE_TYPE")),
		Partitions: 4,
		Prefetch:   50,
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		var data struct{ Seq int }
		if err := m.Event.Payload.DecodeData(&data); err != nil {
			return warren.Permanent(err)
		}
		time.Sleep(work) // the handler's work, not a synchronisation
		partition := m.Queue[strings.LastIndex(m.Queue, ".p")+2:]
		_, err := rdb.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			p.RPush(ctx, prefix+"e:"+m.Event.EntityID, fmt.Sprintf("%d:%s:%s", data.Seq, replica, partition))
			p.Incr(ctx, prefix+"handled:"+replica)
			p.SAdd(ctx, prefix+"done", m.Event.ID)
			return nil
		})
		return err
	})
	return runChild(c)
}

// Ordered scale-out: 4 partitions, 3 replica processes started one after
// the other, 1,000 entities × 20 events published through the fanout
// exchange with the entity header. On one node, with classic and quorum
// queues, the fault is a replica killed; on a three-node cluster it is the
// node leading the partition queues killed (see scaleOut). The first replica, active on every
// partition at first, hands on those past its share; once the replicas
// are busy with the first half, one that has handled events is killed
// with SIGKILL; the second half is published. Every entity's events must
// be handled in order, none lost; the only repeats allowed are the
// killed replica's unacknowledged events, handled again by the replica
// that took the partition over (at-least-once), and the partitions the
// killed replica held must have moved to the survivors.
func TestPartitionsScaleOut(t *testing.T) {
	t.Parallel()
	entities, events := scaleOutSize()
	for _, qt := range []consumer.QueueType{consumer.Classic, consumer.Quorum} {
		t.Run(string(qt), func(t *testing.T) {
			t.Parallel() // each on names of its own
			scaleOut(t, qt, entities, events, nil)
		})
	}
}

// scaleOutSize is the workload of the scale-out tests: entities × events.
func scaleOutSize() (entities, events int) {
	if testing.Short() {
		return 200, 20
	}
	return 1000, 20
}

type replicaProc struct {
	id     string
	cmd    *exec.Cmd
	ready  chan struct{}
	exited chan error
	log    string
}

// scaleOut runs the replicas and the workload. With cl nil it uses the
// shared broker and kills the busiest replica mid-run; with a cluster, the
// replicas get every node's URL and the node leading the partition queues
// (which also holds some replicas' connections) is killed instead. Either
// way every entity's events must be handled in order, none lost; an event
// may be handled again only where its partition passed to another replica
// (the one that lost it had not acked), from there on in order again.
func scaleOut(t *testing.T, qt consumer.QueueType, entities, events int, cl *localrabbit.Cluster) {
	tweak := func(cfg *consumer.Config) { cfg.Partitions, cfg.QueueType = 4, qt }
	var c *consumer.BaseConsumer
	var ch *amqp.Channel
	if cl == nil {
		c, ch = newConsumer(t, tweak), testenv.Channel(t)
	} else {
		c, ch = consumerAt(t, strings.Join(cl.URLs(), ","), tweak), dialNode(t, cl.URLs()[0]).ch
	}
	cfg, topo := c.Config(), c.Topology()
	opts, err := goredis.ParseURL(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := goredis.NewClient(opts)
	ctx := context.Background()
	prefix := testenv.Name(t, "po") + ":"
	t.Cleanup(func() {
		keys, _ := rdb.Keys(ctx, prefix+"*").Result()
		for i := 0; i < len(keys); i += 500 {
			rdb.Del(ctx, keys[i:min(i+500, len(keys))]...)
		}
		rdb.Close()
	})

	startReplica := func(id string) *replicaProc {
		r := &replicaProc{id: id, ready: make(chan struct{}), exited: make(chan error, 1), log: t.TempDir() + "/replica.log"}
		logFile, err := os.Create(r.log)
		if err != nil {
			t.Fatal(err)
		}
		r.cmd = exec.Command(os.Args[0])
		r.cmd.Env = append(os.Environ(), "WARREN_PARTITION_REPLICA="+id, "AMQP_URL="+cfg.URL, "WARREN_QUEUE="+cfg.Name,
			"WARREN_EXCHANGE="+cfg.Exchange, "QUEUE_TYPE="+string(qt), "REDIS_URL="+testenv.RedisURL(t), "REDIS_PREFIX="+prefix, "WORK=300us")
		r.cmd.Stderr = logFile
		stdout, err := r.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if sc.Text() == "ready" {
					close(r.ready)
				}
			}
			r.exited <- r.cmd.Wait()
			logFile.Close()
		}()
		t.Cleanup(func() {
			r.cmd.Process.Kill()
			if t.Failed() {
				out, _ := os.ReadFile(r.log)
				lines := strings.Split(string(out), "\n")
				t.Logf("replica %s log (last lines):\n%s", id, strings.Join(lines[max(0, len(lines)-40):], "\n"))
			}
		})
		select {
		case <-r.ready:
		case err := <-r.exited:
			t.Fatalf("replica %s exited before it was ready: %v", id, err)
		case <-time.After(60 * time.Second):
			t.Fatalf("replica %s not ready within 60s", id)
		}
		return r
	}
	replicas := []*replicaProc{startReplica("a"), startReplica("b"), startReplica("c")}
	testenv.WaitFor(t, 30*time.Second, "three replicas on the roster", func() bool {
		info, err := ch.QueueDeclarePassive(topo.Replicas, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return info.Consumers == 3
	})

	half := events / 2
	publish := func(from, to int) {
		var msgs []amqp.Publishing
		for seq := from; seq <= to; seq++ {
			for e := range entities {
				msgs = append(msgs, publishingsOf(t, seqEvent(fmt.Sprintf("ent%04d", e), seq))...)
			}
		}
		publishInOrderOn(t, ch, topo.Exchange, msgs)
	}
	handled := func() map[string]int64 {
		out := map[string]int64{}
		for _, r := range replicas {
			n, _ := rdb.Get(ctx, prefix+"handled:"+r.id).Int64()
			out[r.id] = n
		}
		return out
	}
	publish(1, half)
	// Wait until the first replica has handed partitions on and the
	// first half is well under way.
	var before map[string]int64
	testenv.WaitFor(t, 60*time.Second, "two replicas handling the first half", func() bool {
		before = handled()
		busy, total := 0, int64(0)
		for _, n := range before {
			total += n
			if n > 0 {
				busy++
			}
		}
		return busy >= 2 && total >= int64(entities*half/4)
	})
	var victim *replicaProc // the replica killed; nil when a node is
	if cl == nil {
		victim = replicas[0] // active on the partitions it kept since it started
		for _, r := range replicas {
			if before[r.id] > before[victim.id] {
				victim = r
			}
		}
		if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-victim.exited
		t.Logf("handled per replica when %s was killed: %v", victim.id, before)
	} else {
		leader := waitLeader(t, cl, topo.PartitionQueues[0])
		cl.Kill(leader)
		t.Logf("handled per replica when node %d, leading %s, was killed: %v", leader, topo.PartitionQueues[0], before)
		// RabbitMQ 3.10 nacks, until the dead node is back, every publish
		// on a channel that first published to a quorum queue while its
		// members were electing a new leader (see relay/nacked.go): the
		// test's own publisher waits for the elections.
		for _, q := range topo.PartitionQueues {
			testenv.WaitFor(t, 2*time.Minute, "a new leader of "+q, func() bool {
				l, err := cl.QueueLeader(ctx, "/", q)
				return err == nil && l != leader
			})
		}
		ch = dialNode(t, cl.URLs()[(leader+1)%len(cl.URLs())]).ch
	}
	publish(half+1, events)
	total := int64(entities * events)
	testenv.WaitFor(t, 120*time.Second, "every event handled", func() bool {
		n, err := rdb.SCard(ctx, prefix+"done").Result()
		return err == nil && n == total
	})
	for _, r := range replicas {
		if r == victim {
			continue
		}
		select {
		case err := <-r.exited:
			t.Fatalf("replica %s exited by itself (%v): a replica must outlive a lost node", r.id, err)
		default:
		}
		r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-r.exited:
			if err != nil {
				t.Errorf("replica %s exited with %v after SIGTERM", r.id, err)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("replica %s did not stop", r.id)
		}
	}
	t.Logf("handled per replica at the end: %v", handled())

	// Every entity's history, in the order handled.
	pipe := rdb.Pipeline()
	lists := make([]*goredis.StringSliceCmd, entities)
	for e := range entities {
		lists[e] = pipe.LRange(ctx, fmt.Sprintf("%se:ent%04d", prefix, e), 0, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	type entry struct {
		seq       int
		replica   string
		partition string
	}
	var repeats, restarts int
	victimHeld := map[string]bool{} // partitions the victim handled events of
	moved := map[string]bool{}      // of those, partitions whose entities a survivor went on with
	for e, cmd := range lists {
		var hist []entry
		for _, s := range cmd.Val() {
			f := strings.Split(s, ":")
			seq, _ := strconv.Atoi(f[0])
			hist = append(hist, entry{seq, f[1], f[2]})
		}
		next, restarted := 1, false
		for i, h := range hist {
			// A hand-over: the partition passed from the replica that
			// handled the previous event to another (from the killed
			// replica, when one was killed).
			handover := i > 0 && h.replica != hist[i-1].replica && (victim == nil || hist[i-1].replica == victim.id)
			switch {
			case h.seq == next:
				next++
			case h.seq < next && (handover && !restarted || victim == nil):
				// The replica that lost the partition had handled events
				// it had not acked: the one that took the partition over
				// gets them again, from the first unacknowledged one, in
				// order. A replica killed loses its partitions once. A
				// node lost can move a partition more than once, and can
				// give the same replica its unacked events again: the
				// queue's new leader returns them, and the replica still
				// holding the partition, or taking it back on its new
				// connection, is delivered them again, in order.
				restarted = true
				restarts++
				repeats += next - h.seq
				next = h.seq + 1
			default:
				t.Fatalf("entity %d handled out of order: %v", e, hist)
			}
			if victim == nil {
				continue
			}
			if h.replica == victim.id {
				victimHeld[h.partition] = true
			} else if i > 0 && hist[i-1].replica == victim.id {
				moved[h.partition] = true
			}
		}
		if next != events+1 {
			t.Fatalf("entity %d: events lost, history %v", e, hist)
		}
	}
	t.Logf("%d entities × %d events handled in order; %d events handled twice, by %d entities' partitions moving with events not acked (at-least-once)",
		entities, events, repeats, restarts)
	if victim != nil && len(victimHeld) == 0 {
		t.Fatalf("the killed replica %s handled nothing", victim.id)
	}
	for p := range victimHeld {
		if !moved[p] {
			t.Errorf("partition %s, which the killed replica handled, did not move to a survivor", p)
		}
	}
	busy := 0
	for _, n := range before {
		if n > 0 {
			busy++
		}
	}
	if busy < 2 {
		t.Errorf("before the kill only %d replica handled events: the first did not hand partitions on", busy)
	}
}
