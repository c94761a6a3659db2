package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Client is everything the store sends to Redis: the scripts, a waiter's
// BLPOP, and what needs one server in particular (a renewal and its WAIT,
// SCAN, doctor's checks). ServerClient and ClusterClient adapt go-redis's
// clients; a test may wrap either, or write its own.
type Client interface {
	// The scripts, run with EVALSHA, loaded with EVAL when Redis lacks them.
	redis.Scripter
	// Do sends one command where its key lives (BLPOP, doctor's probes).
	Do(ctx context.Context, args ...any) *redis.Cmd
	// Pipelined sends fn's commands in one round trip to each server
	// that serves one of their keys (reading many keys' events).
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	// Node is the server that serves key: the one server, or in a cluster
	// the master of the key's slot, as WAIT names no key to route by.
	Node(ctx context.Context, key string) (Node, error)
	// Masters are every master: the one server, or each of a cluster's.
	Masters(ctx context.Context) ([]Node, error)
	// Moved says that a Node answered MOVED or ASK: the slot it was asked
	// for has moved, and the next Node is to be found anew.
	Moved(ctx context.Context)
	// User is the ACL user the client logs in as; "default" when none.
	User() string
	Close() error
}

// Node is one Redis server.
type Node interface {
	ServerCommands
	// Addr is where the node listens, host:port.
	Addr() string
}

// ServerCommands are what the store sends to one server in particular;
// go-redis's client of a server has them.
type ServerCommands interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
	// Pipelined sends fn's commands on one connection, as WAIT needs: it
	// waits for the replicas to have the writes of its own connection.
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	Scan(ctx context.Context, cursor uint64, match string, count int64) *redis.ScanCmd
	ConfigGet(ctx context.Context, parameter string) *redis.MapStringStringCmd
}

// A struct that embeds a go-redis client gets a method for each of its
// hundreds, and the binary one function each: the adapters below embed
// only the small interfaces they need.

// commands is what both go-redis clients answer that a Client passes on.
type commands interface {
	redis.Scripter
	Do(ctx context.Context, args ...any) *redis.Cmd
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	Close() error
}

// node is a go-redis client of one server as a Node.
type node struct {
	ServerCommands
	addr string
}

func (n node) Addr() string { return n.addr }

func newNode(c *redis.Client) Node { return node{c, c.Options().Addr} }

// ServerClient is c, a client of one server or of the master behind
// sentinels (go-redis's failover client), as a Client.
func ServerClient(c *redis.Client) Client { return serverClient{c, c} }

type serverClient struct {
	commands
	c *redis.Client
}

func (s serverClient) Node(context.Context, string) (Node, error) { return newNode(s.c), nil }
func (s serverClient) Masters(context.Context) ([]Node, error)    { return []Node{newNode(s.c)}, nil }
func (serverClient) Moved(context.Context)                        {}
func (s serverClient) User() string                               { return userOr(s.c.Options().Username) }

// ClusterClient is c, a Redis Cluster's client, as a Client. Every key of
// a semaphore, its wake lists included, shares one hash tag, so each
// script runs on the one master that serves its slot; go-redis follows
// MOVED and ASK.
func ClusterClient(c *redis.ClusterClient) Client { return clusterClient{c, c} }

type clusterClient struct {
	commands
	c *redis.ClusterClient
}

func (s clusterClient) Node(ctx context.Context, key string) (Node, error) {
	m, err := s.c.MasterForKey(ctx, key)
	if err != nil {
		return nil, err
	}
	return newNode(m), nil
}

func (s clusterClient) Masters(ctx context.Context) ([]Node, error) {
	var mu sync.Mutex
	var nodes []Node
	err := s.c.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		nodes = append(nodes, newNode(m))
		return nil
	})
	slices.SortFunc(nodes, func(a, b Node) int { return strings.Compare(a.Addr(), b.Addr()) })
	return nodes, err
}

func (s clusterClient) Moved(ctx context.Context) { s.c.ReloadState(ctx) }
func (s clusterClient) User() string              { return userOr(s.c.Options().Username) }

func userOr(name string) string {
	if name == "" {
		return "default"
	}
	return name
}

// recoverHook turns a panic while go-redis reads a reply (an absurd
// length: a broken server, or not Redis at all) into the command's error.
// go-redis drops the connection the panic left half read.
type recoverHook struct{}

func (recoverHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (recoverHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = absurdReply(r)
				cmd.SetErr(err)
			}
		}()
		return next(ctx, cmd)
	}
}

func (recoverHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = absurdReply(r)
				for _, cmd := range cmds {
					cmd.SetErr(err)
				}
			}
		}()
		return next(ctx, cmds)
	}
}

// errAbsurdReply is a reply no Redis sends; nothing is retried after it.
var errAbsurdReply = errors.New("absurd reply from the server")

func absurdReply(r any) error { return fmt.Errorf("%w (%.100v)", errAbsurdReply, r) }
