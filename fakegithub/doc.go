// Package fakegithub is a stateful fake of the GitHub endpoints whilly calls, served over
// HTTP for the real go-github, ghinstallation and git clients. Tests reach it through
// testkit (which fails the test on what the fake reports); `whilly bench` runs
// it in the product binary, so it must not import testing.
//
// It imports only the standard library and golang-jwt; nothing of whilly.
package fakegithub
