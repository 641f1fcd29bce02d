package model

import (
	"fmt"
	"regexp"
)

// localeRE finds the locale ONNX Runtime could not build: StringNormalizer
// (and other text operators) construct one, en_US.UTF-8 by default on
// Linux, and a machine without it fails the session with "Failed to
// construct locale with name:en_US.UTF-8:… install necessary
// language-pack-XX", which names no package a Debian user can install.
var localeRE = regexp.MustCompile(`Failed to construct locale with name:([^:\s]+)`)

// localeHint adds to an ONNX Runtime error about a missing locale what to
// install; other errors are returned as they are.
func localeHint(err error) error {
	m := localeRE.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	name := m[1]
	lang, charset := name, "UTF-8"
	if i := len(name) - len(".UTF-8"); i > 0 && (name[i:] == ".UTF-8" || name[i:] == ".utf-8" || name[i:] == ".utf8") {
		lang = name[:i]
	}
	return fmt.Errorf("%w; the model's text operators need the %s locale, which this machine lacks: install it "+
		"(Debian/Ubuntu: apt-get install locales && localedef -i %s -c -f %s %s, or uncomment %s in /etc/locale.gen and run locale-gen; "+
		"scripts/install-servers.sh does it, and precog's Docker images carry en_US.UTF-8)", err, name, lang, charset, name, name)
}
