package cli

import (
	"context"
	"strings"
	"time"

	ghapp "github.com/whilly-go/whilly/app"
)

// ciSecretsCheck is the name of doctor's lines about the repositories' workflows.
const ciSecretsCheck = "ci secrets"

// doctorScanTimeout bounds the whole workflow scan: up to a hundred repositories.
const doctorScanTimeout = time.Minute

// doctorWorkflows lists, one warning each, the workflows of the App's repositories that
// would run the agent's code with the repository's secrets: whilly cannot stop CI from
// running on its branch, only say where it does. None of these lines is a failure.
func doctorWorkflows(ctx context.Context, rep *doctorReport, f *ghapp.Factory, lim ghapp.WorkflowScanLimits) {
	ctx, cancel := context.WithTimeout(ctx, doctorScanTimeout)
	defer cancel()
	scan, err := f.ScanWorkflows(ctx, lim)
	if err != nil {
		rep.add(ciSecretsCheck, checkWarn, "the repositories' workflows could not be read: %v", err)
		return
	}
	risky, files := 0, 0
	var unread []string
	for _, r := range scan.Repos {
		if r.Err != nil {
			unread = append(unread, r.Err.Error())
			continue
		}
		for _, u := range r.Unread {
			unread = append(unread, r.Repo.String()+" "+u)
		}
		if r.FilesLeft > 0 {
			rep.add(ciSecretsCheck, checkWarn, "%s: %d workflow files past the first %d were not read", r.Repo, r.FilesLeft, lim.FilesPerRepo)
		}
		for _, w := range r.Risks {
			risky++
			rep.add(ciSecretsCheck, checkWarn, "%s %s reads %s and runs on %s: the agent's work meets the repository's secrets; to fix: %s",
				r.Repo, w.Path, strings.Join(w.Secrets, ", "), strings.Join(w.Triggers, ", "), w.Fix)
		}
		files++
	}
	if len(unread) > 0 {
		rep.add(ciSecretsCheck, checkWarn, "not checked: %s", strings.Join(unread, "; "))
	}
	switch {
	case scan.ReposLeft:
		rep.add(ciSecretsCheck, checkWarn, "only the App's first %d repositories were read (%d of them readable): the others were not checked", lim.Repos, files)
	case risky == 0 && len(unread) == 0:
		rep.add(ciSecretsCheck, checkOK, "no workflow of the App's %d repositories runs whilly's branches or pull requests with secrets", files)
	}
}
