package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// The peers: Redis and etcd, each started by the tool on a loopback port
// and driven by its users' own client library, the way they take a lock.

// redisTarget is a redis-server, without persistence or with every write
// fsynced to its append-only file before it answers.
type redisTarget struct {
	d     *daemon
	dir   string
	addr  string
	label string
}

// redisRelease deletes the lock only when it still holds the caller's
// token (redsync's and the Redis docs' release script).
var redisRelease = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

// quietRedisLog drops go-redis's own log lines: the readiness pings
// before redis-server listens print a dial failure each, and every error
// that matters reaches the tool as a command's error.
type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

func openRedis(aof bool) (target, error) {
	redis.SetLogger(quietRedisLog{})
	ports, dir, err := daemonHome("redis", 1)
	if err != nil {
		return nil, err
	}
	port := ports[0]
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--daemonize", "no", "--protected-mode", "yes", "--maxclients", "10000"}
	label := "redis"
	if aof {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
		label = "redis-aof"
	} else {
		args = append(args, "--appendonly", "no")
	}
	d, err := startDaemon("redis-server", args, func() error {
		c := newRedisClient(addr)
		defer c.Close()
		return c.Ping(context.Background()).Err()
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &redisTarget{d: d, dir: dir, addr: addr, label: label}, nil
}

// newRedisClient is one go-redis client with one connection.
func newRedisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MaxRetries: -1, DisableIdentity: true,
		ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
}

func (t *redisTarget) name() string   { return t.label }
func (t *redisTarget) daemonPID() int { return t.d.cmd.Process.Pid }
func (t *redisTarget) close() error   { t.d.stop(); return os.RemoveAll(t.dir) }

func (t *redisTarget) worker(i int, _ bool) (worker, error) {
	c := newRedisClient(t.addr)
	if err := c.Ping(context.Background()).Err(); err != nil {
		c.Close()
		return nil, err
	}
	return &redisWorker{c: c, token: "client-" + strconv.Itoa(i)}, nil
}

type redisWorker struct {
	c     *redis.Client
	token string
}

// acquire is redsync's Lock: SET NX with the lock's expiry; a refused
// client retries after a random 50-250 ms.
func (w *redisWorker) acquire(ctx context.Context, res string) error {
	for {
		ok, err := w.c.SetNX(ctx, res, w.token, 30*time.Second).Result()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50*time.Millisecond + rand.N(200*time.Millisecond)):
		}
	}
}

func (w *redisWorker) release(ctx context.Context, res string) error {
	n, err := redisRelease.Run(ctx, w.c, []string{res}, w.token).Int64()
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("redis release of %s deleted %d keys, want 1", res, n)
	}
	return nil
}

func (w *redisWorker) close() { w.c.Close() }

// etcdTarget is a single-node etcd with its data on disk (fsync on).
type etcdTarget struct {
	d   *daemon
	dir string
	url string
}

func openEtcd() (target, error) {
	ports, dir, err := daemonHome("etcd", 2)
	if err != nil {
		return nil, err
	}
	curl := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	purl := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	d, err := startDaemon("etcd", []string{"--name", "bench", "--data-dir", dir,
		"--listen-client-urls", curl, "--advertise-client-urls", curl,
		"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
		"--initial-cluster", "bench=" + purl, "--log-level", "error", "--logger", "zap"},
		func() error {
			c, err := newEtcdClient(curl)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err = c.Get(ctx, "health")
			return err
		})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &etcdTarget{d: d, dir: dir, url: curl}, nil
}

// newEtcdClient is one clientv3 client (one gRPC connection), quiet.
func newEtcdClient(url string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

func (t *etcdTarget) name() string   { return "etcd" }
func (t *etcdTarget) daemonPID() int { return t.d.cmd.Process.Pid }

func (t *etcdTarget) close() error {
	t.d.stop()
	return os.RemoveAll(t.dir)
}

// worker is one etcd user: its own client and session (a lease kept
// alive), under which concurrency.Mutex puts its lock keys.
func (t *etcdTarget) worker(i int, _ bool) (worker, error) {
	c, err := newEtcdClient(t.url)
	if err != nil {
		return nil, err
	}
	s, err := concurrency.NewSession(c, concurrency.WithTTL(60))
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("etcd session: %w", err)
	}
	return &etcdWorker{c: c, s: s, held: map[string]*concurrency.Mutex{}}, nil
}

type etcdWorker struct {
	c    *clientv3.Client
	s    *concurrency.Session
	held map[string]*concurrency.Mutex
}

// acquire is Mutex.Lock: it puts the client's key under the lock's prefix
// and, when an earlier key is there, waits on a watch for its deletion.
func (w *etcdWorker) acquire(ctx context.Context, res string) error {
	m := concurrency.NewMutex(w.s, "/lock/"+res)
	if err := m.Lock(ctx); err != nil {
		return err
	}
	w.held[res] = m
	return nil
}

func (w *etcdWorker) release(ctx context.Context, res string) error {
	m := w.held[res]
	if m == nil {
		return errors.New("etcd: releasing a lock not held")
	}
	delete(w.held, res)
	return m.Unlock(ctx)
}

func (w *etcdWorker) close() {
	w.s.Close()
	w.c.Close()
}

// daemonHome picks n free ports and makes a temporary folder for the
// peer daemon name.
func daemonHome(name string, n int) (ports []int, dir string, err error) {
	for range n {
		p, err := freePort()
		if err != nil {
			return nil, "", err
		}
		ports = append(ports, p)
	}
	dir, err = os.MkdirTemp("", "leaseplane-bench-"+name+"-")
	return ports, dir, err
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// daemon is a peer's server process that the tool started.
type daemon struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// startDaemon starts a peer's server process and waits until ready
// answers nil (or 15 s pass).
func startDaemon(name string, args []string, ready func() error) (*daemon, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("%s is not installed (apt-get install -y %s): %w", name, debianPackage(name), err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	d := &daemon{cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(d.exited) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := ready()
		if err == nil {
			return d, nil
		}
		select {
		case <-d.exited:
			return nil, fmt.Errorf("%s exited before it was ready: %v", name, cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("%s not ready after 15 s: %w", name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop kills the process and waits for it.
func (d *daemon) stop() {
	d.cmd.Process.Kill()
	<-d.exited
}

func debianPackage(name string) string {
	if name == "etcd" {
		return "etcd-server"
	}
	return name
}
