package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on
// every Linux architecture Go runs on.
const clockTicks = 100

// procCPU is the CPU time (user + system) process pid has used so far, from
// /proc/<pid>/stat.
func procCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(data)
}

// parseStatCPU reads utime and stime (fields 14 and 15) of a
// /proc/<pid>/stat line. The command name (field 2) is in parentheses and
// may hold spaces and parentheses, so fields are counted after the last ')'.
func parseStatCPU(stat []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("/proc/<pid>/stat: no ')' after the command name")
	}
	fields := strings.Fields(string(stat[i+1:]))
	// fields[0] is field 3 (state); utime is field 14, stime field 15.
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/<pid>/stat: %d fields after the command name; want at least 13", len(fields))
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/<pid>/stat: utime/stime: %w", err)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// selfCPU is the CPU time (user + system) this process has used so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuMeter measures the CPU the client, the server and etcd of one target
// use during a window. A process that is not known (no pid) or cannot be
// read is NaN.
type cpuMeter struct {
	serverPID, etcdPID int
	start              time.Time
	client             time.Duration
	server, etcd       time.Duration
	serverOK, etcdOK   bool
}

func startCPU(serverPID, etcdPID int) *cpuMeter {
	m := &cpuMeter{serverPID: serverPID, etcdPID: etcdPID}
	if serverPID > 0 {
		var err error
		m.server, err = procCPU(serverPID)
		m.serverOK = err == nil
	}
	if etcdPID > 0 {
		var err error
		m.etcd, err = procCPU(etcdPID)
		m.etcdOK = err == nil
	}
	m.client = selfCPU()
	m.start = time.Now()
	return m
}

// cpuUse is CPU time over a window, in cores (1 = one core busy all the
// window), NaN when unknown.
type cpuUse struct {
	Client, Server, Etcd float64
	// Wall is the window's length in seconds.
	Wall float64
}

// cpuTime is the CPU time of each process over a window, in seconds
// (cores × window seconds), NaN when unknown.
type cpuTime struct {
	Client, Server, Etcd float64
}

func (u cpuUse) time() cpuTime {
	return cpuTime{Client: u.Client * u.Wall, Server: u.Server * u.Wall, Etcd: u.Etcd * u.Wall}
}

func (t cpuTime) plus(o cpuTime) cpuTime {
	return cpuTime{Client: t.Client + o.Client, Server: t.Server + o.Server, Etcd: t.Etcd + o.Etcd}
}

// perOp is the CPU µs per operation of each process when ops operations
// completed in t: NaN when the time is unknown or nothing completed.
func (t cpuTime) perOp(ops int64) CPUJSON {
	micros := func(sec float64) jfloat {
		if ops <= 0 {
			return jfloat(nan)
		}
		return jfloat(sec * 1e6 / float64(ops))
	}
	return CPUJSON{Client: micros(t.Client), Server: micros(t.Server), Etcd: micros(t.Etcd)}
}

func (m *cpuMeter) stop() cpuUse {
	wall := time.Since(m.start).Seconds()
	client := selfCPU()
	use := cpuUse{Client: (client - m.client).Seconds() / wall, Server: nan, Etcd: nan, Wall: wall}
	if m.serverOK {
		if now, err := procCPU(m.serverPID); err == nil {
			use.Server = (now - m.server).Seconds() / wall
		}
	}
	if m.etcdOK {
		if now, err := procCPU(m.etcdPID); err == nil {
			use.Etcd = (now - m.etcd).Seconds() / wall
		}
	}
	return use
}

// loadAverage is the 1, 5 and 15 minute load averages of /proc/loadavg.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
