package runner

import (
	"errors"
	"os"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/windows"
)

type waitStatus = syscall.WaitStatus

// group is the Job Object the child runs in. Every process the child
// starts is in it too, so ending the job ends them all. Windows ends it
// when its last handle, semrun's, closes: the child dies with semrun even
// when semrun is killed.
type group struct{ job windows.Handle }

// waitsForGroup: the Job Object's processes are all waited for.
const waitsForGroup = true

// stillInGroup cannot list a Job Object's processes: it says some are left.
func stillInGroup(group) ([]Process, bool) { return nil, true }

// deliver does nothing: Ctrl-C, Ctrl-Break and a closing console reach
// every process of the console, the child included, straight from Windows.
func (group) deliver(os.Signal) (stopped bool) { return false }

// terminate ends the job at once, with no grace period: Windows has no
// SIGTERM, and Ctrl-Break reaches the child alone only in a console process
// group of its own, where Ctrl-C would no longer reach it.
func (g group) terminate() { g.kill() }
func (g group) kill()      { _ = windows.TerminateJobObject(g.job, 1) }

// unstopped is empty: ending the job ends every process in it, whatever
// its user.
func (group) unstopped(bool) []Unstopped { return nil }

// close closes the job, ending whatever is still in it.
func (g group) close() { _ = windows.CloseHandle(g.job) }

// start starts the command at path in a Job Object of its own, and
// reports its end on events. The child starts suspended and runs only once
// it is in the job, so that no process it starts can escape the job.
// spec.Inherit is not passed on: only the local store has files to pass,
// and Windows has no local store. Run never abandons the child here (the
// job ends whatever is in it), and no orphan is semrun's to reap.
func start(path string, spec Spec, _ *terminal, events chan<- waitEvent, _ <-chan struct{}) (group, error) {
	var files []uintptr
	for _, f := range []*os.File{spec.Stdin, spec.Stdout, spec.Stderr} {
		if f == nil { // as with os/exec: the null device
			null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
			if err != nil {
				return group{}, err
			}
			defer null.Close()
			f = null
		}
		files = append(files, f.Fd())
	}
	job, err := newJob()
	if err != nil {
		return group{}, err
	}
	pid, h, err := syscall.StartProcess(path, spec.Args, &syscall.ProcAttr{
		Env: spec.Env, Files: files,
		Sys: &syscall.SysProcAttr{CreationFlags: windows.CREATE_SUSPENDED},
	})
	runtime.KeepAlive(spec) // its files stay open until the child has them
	if err != nil {
		_ = windows.CloseHandle(job)
		return group{}, err
	}
	proc := windows.Handle(h)
	err = windows.AssignProcessToJobObject(job, proc)
	if err == nil {
		err = resumeThreads(uint32(pid))
	}
	if err != nil {
		_ = windows.TerminateProcess(proc, 1)
		_ = windows.CloseHandle(proc)
		_ = windows.CloseHandle(job)
		return group{}, err
	}
	go reap(proc, job, events)
	return group{job: job}, nil
}

// newJob makes a Job Object that ends its processes when its last handle
// closes. The handle is not inheritable, so only semrun holds it.
func newJob() (windows.Handle, error) {
	job, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return 0, err
	}
	var info windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION
	info.BasicLimitInformation.LimitFlags = windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
	if _, err := windows.SetInformationJobObject(job, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		_ = windows.CloseHandle(job)
		return 0, err
	}
	return job, nil
}

// resumeThreads resumes the threads of the suspended process pid: its main
// thread, the only one it has. syscall.StartProcess does not return it.
func resumeThreads(pid uint32) error {
	snap, err := windows.CreateToolhelp32Snapshot(windows.TH32CS_SNAPTHREAD, 0)
	if err != nil {
		return err
	}
	defer windows.CloseHandle(snap)
	resumed := 0
	t := windows.ThreadEntry32{Size: uint32(unsafe.Sizeof(windows.ThreadEntry32{}))}
	for err = windows.Thread32First(snap, &t); err == nil; err = windows.Thread32Next(snap, &t) {
		if t.OwnerProcessID != pid {
			continue
		}
		th, openErr := windows.OpenThread(windows.THREAD_SUSPEND_RESUME, false, t.ThreadID)
		if openErr != nil {
			return openErr
		}
		_, resumeErr := windows.ResumeThread(th)
		_ = windows.CloseHandle(th)
		if resumeErr != nil {
			return resumeErr
		}
		resumed++
	}
	if !errors.Is(err, windows.ERROR_NO_MORE_FILES) {
		return err
	}
	if resumed == 0 {
		return errors.New("the new process has no thread to resume")
	}
	return nil
}

// lingerPoll is how often a job the child left processes in is looked at:
// Windows signals no job's end, and its notifications may be dropped.
const lingerPoll = 100 * time.Millisecond

// reap waits for the child to exit and reports it on events; when it left
// processes in its job, a groupGone event follows once they are gone.
func reap(proc, job windows.Handle, events chan<- waitEvent) {
	defer windows.CloseHandle(proc)
	var code uint32
	_, err := windows.WaitForSingleObject(proc, windows.INFINITE)
	if err == nil {
		err = windows.GetExitCodeProcess(proc, &code)
	}
	if err != nil {
		code = 1 // cannot happen for our own child; never report a success
	}
	status := waitStatus{ExitCode: code}
	if jobEmpty(job) {
		events <- waitEvent{status: status}
		return
	}
	events <- waitEvent{status: status, lingering: true}
	for !jobEmpty(job) {
		time.Sleep(lingerPoll)
	}
	events <- waitEvent{groupGone: true}
}

// jobAccounting is JOBOBJECT_BASIC_ACCOUNTING_INFORMATION, which
// golang.org/x/sys/windows does not define.
type jobAccounting struct {
	TotalUserTime, TotalKernelTime                     int64
	ThisPeriodTotalUserTime, ThisPeriodTotalKernelTime int64
	TotalPageFaultCount, TotalProcesses                uint32
	ActiveProcesses, TotalTerminatedProcesses          uint32
}

// jobEmpty tells whether no process is left in job; one that cannot be
// asked counts as empty, so that semrun never waits forever on it.
func jobEmpty(job windows.Handle) bool {
	var info jobAccounting
	err := windows.QueryInformationJobObject(job, windows.JobObjectBasicAccountingInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info)), nil)
	return err != nil || info.ActiveProcesses == 0
}

// terminal does nothing on Windows: Ctrl-C reaches the child from the
// console, which has no foreground process group to hand over.
type terminal struct{}

func newTerminal(*os.File) *terminal { return nil }
func (*terminal) reclaim()           {}
func (*terminal) suspend()           {}
func (*terminal) resume(group)       {}

// InBackground is false: a Windows console has no foreground process group.
func InBackground(int) bool { return false }
