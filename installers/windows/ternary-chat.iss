; Inno Setup script for Ternary Chat (per-user install, no administrator rights needed).
;
;   1. pyinstaller --noconfirm --clean installers\pyinstaller\ternary-chat.spec   (from the repo root)
;   2. "C:\Program Files (x86)\Inno Setup 6\ISCC.exe" installers\windows\ternary-chat.iss
;
; Output: installers\windows\Output\ternary-chat-setup-0.1.0.exe
; Chats, settings and models live in %LOCALAPPDATA%\ternary-chat and are kept on uninstall.

#define AppName "Ternary Chat"
#define AppVersion "0.1.0"
#define AppExe "ternary-chat.exe"
#define DistDir "..\..\dist\ternary-chat"

[Setup]
AppId={{6B1E4C7A-3F0B-4E7D-9A51-2C8D0F3E7B21}
AppName={#AppName}
AppVersion={#AppVersion}
AppPublisher=Ternary Chat contributors
DefaultDirName={localappdata}\Programs\Ternary Chat
DefaultGroupName={#AppName}
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
OutputBaseFilename=ternary-chat-setup-{#AppVersion}
SetupIconFile=ternary-chat.ico
UninstallDisplayIcon={app}\{#AppExe}
Compression=lzma2/max
SolidCompression=yes
WizardStyle=modern
DisableProgramGroupPage=yes

[Languages]
Name: "english"; MessagesFile: "compiler:Default.isl"
; 简体中文 setup wizard: ChineseSimplified.isl is an unofficial Inno Setup translation. Download it from
; https://jrsoftware.org/files/istrans/ into the compiler's Languages folder and uncomment:
; Name: "chinesesimplified"; MessagesFile: "compiler:Languages\ChineseSimplified.isl"

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"

[Files]
Source: "{#DistDir}\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{group}\{#AppName}"; Filename: "{app}\{#AppExe}"
Name: "{autodesktop}\{#AppName}"; Filename: "{app}\{#AppExe}"; Tasks: desktopicon

[Run]
Filename: "{app}\{#AppExe}"; Description: "{cm:LaunchProgram,{#AppName}}"; Flags: nowait postinstall skipifsilent
