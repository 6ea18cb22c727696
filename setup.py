"""Packaging for dflash_nb: every setting is read from `settings.ini` (the nbdev 2 layout)."""
from configparser import ConfigParser
import setuptools, shlex, shutil
from pathlib import Path
from setuptools.command.build_py import build_py

config = ConfigParser(delimiters=['='])
config.read('settings.ini', encoding='utf-8')
cfg = config['DEFAULT']

expected = ('version description keywords author author_email license status min_python '
            'audience language lib_name user').split()
missing = [o for o in expected if o not in cfg]
if missing: raise ValueError(f'settings.ini is missing: {missing}')
setup_cfg = {o: cfg[o] for o in 'version description keywords author author_email'.split()}

licenses = {'apache2': ('Apache Software License 2.0', 'OSI Approved :: Apache Software License')}
statuses = ['1 - Planning', '2 - Pre-Alpha', '3 - Alpha', '4 - Beta', '5 - Production/Stable',
            '6 - Mature', '7 - Inactive']
py_versions = '3.10 3.11 3.12 3.13'.split()

requirements = shlex.split(cfg.get('requirements', ''))
dev_requirements = shlex.split(cfg.get('dev_requirements', ''))
lic = licenses.get(cfg['license'].lower(), (cfg['license'], None))
min_python = cfg['min_python']
console_scripts = cfg.get('console_scripts', '').split()

class BuildWithNotebooks(build_py):
    """The chain executes the stage notebooks, so a built package carries them: `nbs/*.ipynb` are copied into
    `dflash_nb/nbs/` of the build (an editable install reads `nbs/` of the checkout instead; `core.nbs_dir`), with
    the project's `settings.ini` in `dflash_nb/`, its `lib_path` made `.`: nbdev's tools (the docs renderer, `show_doc`)
    find the same configuration above the installed notebooks as above the checkout's."""
    def run(self):
        super().run()
        if getattr(self, 'editable_mode', False): return
        pkg = Path(self.build_lib) / cfg['lib_name']
        (pkg / 'nbs').mkdir(parents=True, exist_ok=True)
        for nb in sorted(Path(cfg.get('nbs_path', 'nbs')).glob('*.ipynb')): shutil.copy2(nb, pkg / 'nbs' / nb.name)
        ini = ConfigParser(delimiters=['='], interpolation=None)
        ini.read('settings.ini', encoding='utf-8')
        ini['DEFAULT']['lib_path'] = '.'
        with open(pkg / 'settings.ini', 'w', encoding='utf-8') as f: ini.write(f)

setuptools.setup(
    cmdclass={'build_py': BuildWithNotebooks},
    name=cfg['lib_name'].replace('_', '-'),
    license=lic[0],
    classifiers=['Development Status :: ' + statuses[int(cfg['status'])],
                 'Intended Audience :: ' + cfg['audience'].title(),
                 'Natural Language :: ' + cfg['language'].title()]
                + ['Programming Language :: Python :: ' + o for o in py_versions[py_versions.index(min_python):]]
                + (['License :: ' + lic[1]] if lic[1] else []),
    url=cfg['git_url'],
    packages=setuptools.find_packages(include=[cfg['lib_name'], cfg['lib_name'] + '.*']),
    include_package_data=True,
    package_data={cfg['lib_name']: ['configs/*.yaml', 'configs/*.json', 'data/*.jsonl', 'data/*.json', 'templates/*.jinja',
                                   'assets/*']},
    install_requires=requirements,
    extras_require={'dev': dev_requirements},
    dependency_links=cfg.get('dep_links', '').split(),
    python_requires='>=' + min_python,
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    zip_safe=False,
    entry_points={'console_scripts': console_scripts, 'nbdev': [f'{cfg.get("lib_path")}={cfg.get("lib_path")}._modidx:d']},
    **setup_cfg)
